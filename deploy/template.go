package deploy

import _ "embed" // the injection template, for the tests and the bench that run adstap as a pod does

// InjectionTemplate is deploy/sidecar.yaml, the sidecar
// injection template users install into istiod.
//
//go:embed sidecar.yaml
var InjectionTemplate string
