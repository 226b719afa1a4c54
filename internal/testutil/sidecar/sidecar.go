// Package sidecar reads the adstap container of the injection template (deploy/sidecar.yaml) — its flags, environment and memory request and limit — so that tests and the bench run adstap as an injected pod does.
package sidecar

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/adstap/adstap/deploy"
)

// Container is the adstap container as the template writes it, before
// Istio's injector renders it: a value the injector fills in (the pod's
// discovery address, its ports) is kept as the template expression it is.
type Container struct {
	// Args are the container's arguments, "run" first.
	Args []string
	// Env are its variables in order; a value from the downward API is
	// "valueFrom".
	Env []EnvVar
	// MemoryRequest and MemoryLimit are its resources, in bytes.
	MemoryRequest, MemoryLimit int64
}

// EnvVar is one variable of the container.
type EnvVar struct{ Name, Value string }

// fromDownwardAPI is the Value of a variable the kubelet fills in.
const fromDownwardAPI = "valueFrom"

// Injected reads the adstap container of deploy.InjectionTemplate.
func Injected() (Container, error) { return parse(deploy.InjectionTemplate) }

// parse reads the adstap container of an injection template: the lines of
// its args, env and resources, which the template writes literally.
func parse(tmpl string) (Container, error) {
	lines := strings.Split(tmpl, "\n")
	start := slices.Index(lines, "  - name: adstap")
	if start < 0 {
		return Container{}, errors.New("sidecar: the template has no container named adstap")
	}
	var c Container
	var request, limit string
	section, sub := "", ""
	for _, line := range lines[start+1:] {
		indent := len(line) - len(strings.TrimLeft(line, " "))
		text := strings.TrimSpace(line)
		if text == "" {
			continue
		}
		if indent <= 2 {
			break // the next container, or the end of the list
		}
		if indent == 4 && !strings.HasPrefix(text, "- ") {
			section, sub = strings.TrimSuffix(text, ":"), ""
			continue
		}
		switch section {
		case "args":
			if v, ok := strings.CutPrefix(text, "- "); ok {
				c.Args = append(c.Args, v)
			}
		case "env":
			switch {
			case strings.HasPrefix(text, "- name: "):
				c.Env = append(c.Env, EnvVar{Name: strings.TrimPrefix(text, "- name: ")})
			case len(c.Env) == 0:
			case strings.HasPrefix(text, "value: "):
				c.Env[len(c.Env)-1].Value = strings.TrimPrefix(text, "value: ")
			case text == "valueFrom:":
				c.Env[len(c.Env)-1].Value = fromDownwardAPI
			}
		case "resources":
			if indent == 6 {
				sub = strings.TrimSuffix(text, ":")
			} else if v, ok := strings.CutPrefix(text, "memory: "); ok && sub == "requests" {
				request = v
			} else if ok && sub == "limits" {
				limit = v
			}
		}
	}
	if len(c.Args) == 0 || c.Args[0] != "run" {
		return Container{}, fmt.Errorf("sidecar: the adstap container's args %q do not start with run", c.Args)
	}
	var err error
	if c.MemoryRequest, err = quantity("request", request); err != nil {
		return Container{}, err
	}
	if c.MemoryLimit, err = quantity("limit", limit); err != nil {
		return Container{}, err
	}
	return c, nil
}

func quantity(what, v string) (int64, error) {
	q, err := resource.ParseQuantity(v)
	if err != nil {
		return 0, fmt.Errorf("sidecar: the adstap container's memory %s %q: %v", what, v, err)
	}
	return q.Value(), nil
}

// templated reports whether a value is left for the injector to fill in.
func templated(v string) bool { return strings.Contains(v, "{{") }

// CommandLine is what the container runs with, here: the arguments after
// "run", each flag of set given its value instead ("" leaves it out), and
// the literal variables, each of set given its value instead ("" leaves it
// out). Every flag and variable the injector fills in, or the kubelet, must
// be in set: a test says what each is on this machine.
func (c Container) CommandLine(set map[string]string) (args, env []string, err error) {
	used := map[string]bool{}
	for _, a := range c.Args[1:] {
		name, value, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if v, ok := set["--"+name]; ok {
			used["--"+name] = true
			if v != "" {
				args = append(args, "--"+name+"="+v)
			}
			continue
		}
		if templated(value) {
			return nil, nil, fmt.Errorf("sidecar: %s is filled in by the injector: give it a value", a)
		}
		args = append(args, a)
	}
	for _, e := range c.Env {
		if v, ok := set[e.Name]; ok {
			used[e.Name] = true
			if v != "" {
				env = append(env, e.Name+"="+v)
			}
			continue
		}
		if templated(e.Value) || e.Value == fromDownwardAPI {
			return nil, nil, fmt.Errorf("sidecar: %s is filled in by the injector or the kubelet: give it a value", e.Name)
		}
		env = append(env, e.Name+"="+strings.Trim(e.Value, `"`))
	}
	for k := range set {
		if !used[k] {
			return nil, nil, fmt.Errorf("sidecar: %s is not in the template's adstap container", k)
		}
	}
	return args, env, nil
}
