// Command seccomp writes what containerd's CRI plugin starts a container's OCI spec from, for
// the lab's kubelet: containerd's default spec as CRI takes it ("spec": its mounts without
// /run, capabilities, namespaces; no masked or read-only paths, which the kubelet passes; no
// rlimits, seccomp or AppArmor), and containerd's RuntimeDefault seccomp profile for a
// container with the default capabilities ("base") with, for every capability that widens it,
// the rules it adds ("byCapability"). Run by scripts/gen-runtime-defaults.sh; its output is
// committed.
package main

import (
	"encoding/json"
	"os"
	"reflect"

	"context"

	"github.com/containerd/containerd/v2/contrib/seccomp"
	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/containerd/v2/pkg/oci"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// Every capability Linux knows, as the runtime spec names them.
var all = []string{
	"CAP_AUDIT_CONTROL", "CAP_AUDIT_READ", "CAP_AUDIT_WRITE", "CAP_BLOCK_SUSPEND", "CAP_BPF",
	"CAP_CHECKPOINT_RESTORE", "CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_DAC_READ_SEARCH", "CAP_FOWNER",
	"CAP_FSETID", "CAP_IPC_LOCK", "CAP_IPC_OWNER", "CAP_KILL", "CAP_LEASE", "CAP_LINUX_IMMUTABLE",
	"CAP_MAC_ADMIN", "CAP_MAC_OVERRIDE", "CAP_MKNOD", "CAP_NET_ADMIN", "CAP_NET_BIND_SERVICE",
	"CAP_NET_BROADCAST", "CAP_NET_RAW", "CAP_PERFMON", "CAP_SETFCAP", "CAP_SETGID", "CAP_SETPCAP",
	"CAP_SETUID", "CAP_SYS_ADMIN", "CAP_SYS_BOOT", "CAP_SYS_CHROOT", "CAP_SYS_MODULE", "CAP_SYS_NICE",
	"CAP_SYS_PACCT", "CAP_SYS_PTRACE", "CAP_SYS_RAWIO", "CAP_SYS_RESOURCE", "CAP_SYS_TIME",
	"CAP_SYS_TTY_CONFIG", "CAP_SYSLOG", "CAP_WAKE_ALARM",
}

func profile(caps []string) *specs.LinuxSeccomp {
	s := &specs.Spec{Process: &specs.Process{Capabilities: &specs.LinuxCapabilities{Bounding: caps}}}
	return seccomp.DefaultProfile(s)
}

func contains(list []specs.LinuxSyscall, x specs.LinuxSyscall) bool {
	for _, y := range list {
		if reflect.DeepEqual(x, y) {
			return true
		}
	}
	return false
}

func main() {
	ctx := namespaces.WithNamespace(context.Background(), "k8s.io")
	spec, err := oci.GenerateSpec(ctx, nil, &containers.Container{ID: "ID"},
		oci.WithoutRunMount, oci.WithMaskedPaths([]string{}), oci.WithReadonlyPaths([]string{}))
	if err != nil {
		panic(err)
	}
	// As CRI's WithoutDefaultSecuritySettings: no default seccomp, AppArmor or rlimits.
	spec.Process.Rlimits = nil
	spec.Process.ApparmorProfile = ""
	spec.Linux.Seccomp = nil
	defaults := spec.Process.Capabilities.Bounding
	base := profile(defaults)
	extra := map[string][]specs.LinuxSyscall{}
	for _, c := range all {
		p := profile(append(append([]string{}, defaults...), c))
		for _, rule := range p.Syscalls {
			if !contains(base.Syscalls, rule) {
				extra[c] = append(extra[c], rule)
			}
		}
	}
	out := map[string]any{
		"spec":                spec,
		"base":                base,
		"byCapability":        extra,
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", " ")
	if err := enc.Encode(out); err != nil {
		panic(err)
	}
}
