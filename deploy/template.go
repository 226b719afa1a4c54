package deploy

import _ "embed" // the injection template, for the tests and the bench that run adstap as a pod does

// InjectionTemplate is deploy/istio/adstap-template.tmpl, the sidecar
// injection template users install into istiod.
//
//go:embed istio/adstap-template.tmpl
var InjectionTemplate string
