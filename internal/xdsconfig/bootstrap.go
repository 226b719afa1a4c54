package xdsconfig

import (
	"encoding/json"
	"fmt"
)

// ChannelCreds is one entry of a grpc-go bootstrap server's channel_creds.
// Config is marshalled to JSON as is.
type ChannelCreds struct {
	Type   string `json:"type"`
	Config any    `json:"config,omitempty"`
}

// BootstrapJSON is a grpc-go xDS bootstrap that reaches serverURI (host:port
// or unix:///path) as nodeID of cluster; plaintext unless creds say otherwise.
func BootstrapJSON(serverURI, nodeID, cluster string, creds ...ChannelCreds) ([]byte, error) {
	if len(creds) == 0 {
		creds = []ChannelCreds{{Type: "insecure"}}
	}
	type server struct {
		ServerURI    string         `json:"server_uri"`
		ChannelCreds []ChannelCreds `json:"channel_creds"`
	}
	b, err := json.Marshal(struct {
		XDSServers []server       `json:"xds_servers"`
		Node       map[string]any `json:"node"`
	}{
		XDSServers: []server{{ServerURI: serverURI, ChannelCreds: creds}},
		Node: map[string]any{
			"id":       nodeID,
			"cluster":  cluster,
			"locality": map[string]string{"region": "adstap", "zone": "loopback"},
		},
	})
	if err != nil {
		return nil, fmt.Errorf("building the xDS bootstrap: %w", err)
	}
	return b, nil
}
