// Package origin names the Istio configuration objects a rejected push came from, as istiod records them in the resources it sends.
package origin

import (
	"strings"
	"unicode"
)

// Object is an Istio configuration object, as istiod records it in a
// resource's metadata (filter_metadata "istio", field "config"):
// /apis/<group>/<version>/namespaces/<namespace>/<kebab-kind>/<name>, e.g.
// /apis/networking.istio.io/v1/namespaces/shop/destination-rule/reviews.
type Object struct {
	Group   string `json:"group"`   // networking.istio.io
	Version string `json:"version"` // v1
	// Kind is the object's kind as Kubernetes spells it: DestinationRule,
	// VirtualService, Sidecar...
	Kind      string `json:"kind"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Path is the string as it was recorded.
	Path string `json:"path"`
}

// ParsePath reads the path istiod records (pilot/pkg/networking/util,
// AddConfigInfoMetadata). A string of another shape is not an object.
func ParsePath(p string) (Object, bool) {
	parts := strings.Split(p, "/")
	// "", "apis", group, version, "namespaces", ns, kind, name
	if len(parts) != 8 || parts[0] != "" || parts[1] != "apis" || parts[4] != "namespaces" {
		return Object{}, false
	}
	for _, s := range parts[2:] {
		if s == "" {
			return Object{}, false
		}
	}
	return Object{Group: parts[2], Version: parts[3], Kind: kindOf(parts[6]), Namespace: parts[5], Name: parts[7], Path: p}, true
}

// kindOf turns istiod's kebab-case kind back into the kind:
// destination-rule is DestinationRule.
func kindOf(kebab string) string {
	var b strings.Builder
	for _, w := range strings.Split(kebab, "-") {
		if w == "" {
			continue
		}
		r := []rune(w)
		r[0] = unicode.ToUpper(r[0])
		b.WriteString(string(r))
	}
	return b.String()
}

// String is how operators name it: "DestinationRule shop/reviews".
func (o Object) String() string { return o.Kind + " " + o.Namespace + "/" + o.Name }

// Kubectl is the command that shows the object:
// "kubectl get destinationrule -n shop reviews".
func (o Object) Kubectl() string {
	resource := strings.ToLower(o.Kind)
	if resource == "gateway" {
		// Alone, the word also names the Gateway API's kind.
		resource = "gateways." + o.Group
	}
	return "kubectl get " + resource + " -n " + o.Namespace + " " + o.Name
}
