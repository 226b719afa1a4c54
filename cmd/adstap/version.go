package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

// Set at build time: go build -ldflags "-X main.version=v0.1.0 -X main.commit=abc1234".
var (
	version = "dev"
	commit  = ""
)

type buildInfo struct{ Version, Commit, GoVersion string }

func currentBuild() buildInfo {
	b := buildInfo{Version: version, Commit: commit, GoVersion: runtime.Version()}
	if b.Commit == "" {
		if info, ok := debug.ReadBuildInfo(); ok {
			dirty := false
			for _, s := range info.Settings {
				switch s.Key {
				case "vcs.revision":
					b.Commit = s.Value
				case "vcs.modified":
					dirty = s.Value == "true"
				}
			}
			if len(b.Commit) > 12 {
				b.Commit = b.Commit[:12]
			}
			if dirty {
				b.Commit += "-dirty"
			}
		}
	}
	if b.Commit == "" {
		b.Commit = "unknown"
	}
	return b
}

func printVersion(w io.Writer) {
	b := currentBuild()
	fmt.Fprintf(w, "adstap %s\ncommit %s\n%s\n", b.Version, b.Commit, b.GoVersion)
}
