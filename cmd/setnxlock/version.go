package main

import "runtime/debug"

// version is set at build time: make cli passes -X main.version=$(git describe).
var version = ""

// buildVersion is the version the binary was built as: the one make cli
// stamped, else the module version go install recorded, else "devel".
func buildVersion() string {
	if version != "" {
		return version
	}
	if info, ok := debug.ReadBuildInfo(); ok && info.Main.Version != "" && info.Main.Version != "(devel)" {
		return info.Main.Version
	}
	return "devel"
}
