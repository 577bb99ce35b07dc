package cluster

import (
	"context"
	"debug/buildinfo"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
)

// SourceDir returns the module cache directory of the module the binary at
// path was built from (its main module and version, from the binary's
// build information), downloading it if needed. Manifests and
// configuration shipped with a tool (kwok's stages, metrics-server's
// release manifests) are then those of the very release that runs. It runs
// the go command.
func SourceDir(ctx context.Context, path string) (string, error) {
	info, err := buildinfo.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("build information of %s: %w", path, err)
	}
	return ModuleDir(ctx, info.Main.Path+"@"+info.Main.Version)
}

// ModuleDir returns the module cache directory of module ("path@version"),
// downloading it if needed. It runs the go command.
func ModuleDir(ctx context.Context, module string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", "mod", "download", "-json", module)
	cmd.Dir = os.TempDir() // outside any module
	cmd.Env = append(os.Environ(), "GOWORK=off")
	out, err := cmd.Output()
	var m struct{ Dir string }
	if err == nil {
		err = json.Unmarshal(out, &m)
	}
	if err == nil && m.Dir == "" {
		err = errors.New("no directory")
	}
	if err != nil {
		return "", fmt.Errorf("go mod download %s: %w", module, err)
	}
	return m.Dir, nil
}
