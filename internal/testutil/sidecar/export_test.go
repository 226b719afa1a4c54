package sidecar

// The external tests parse templates of their own and check what the
// kubelet fills in.
var (
	Parse           = parse
	FromDownwardAPI = fromDownwardAPI
)
