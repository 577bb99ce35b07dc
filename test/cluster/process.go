package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// stopGracePeriod is how long a process gets to exit after SIGTERM before its
// process group is killed.
const stopGracePeriod = 10 * time.Second

// Process is a child process whose stdout and stderr go to a log file. It runs
// in its own process group, which Stop signals as a whole. The kernel kills
// the process with SIGKILL if the Go process that started it dies first, so a
// crashed or killed test leaves nothing behind.
type Process struct {
	name    string
	logPath string
	cmd     *exec.Cmd
	cancel  context.CancelFunc

	done chan struct{}
	err  error // set before done is closed
}

// startProcess starts path with args, appending its output to logPath. Stop
// gives it grace to exit after SIGTERM.
func startProcess(name, logPath string, grace time.Duration, env []string, path string, args ...string) (*Process, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open log for %s: %w", name, err)
	}
	// The child holds its own copy of the file.
	defer func() { _ = logFile.Close() }()
	fmt.Fprintf(logFile, "### %s %s\n", path, strings.Join(args, " "))

	// Cancelling ctx sends SIGTERM to the group; after grace, os/exec kills
	// the leader.
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Stdout, cmd.Stderr, cmd.Env = logFile, logFile, env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) }
	cmd.WaitDelay = grace
	if err := cmd.Start(); err != nil {
		cancel()
		return nil, fmt.Errorf("start %s (%s): %w", name, path, err)
	}
	p := &Process{name: name, logPath: logPath, cmd: cmd, cancel: cancel, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		if errors.Is(p.err, context.Canceled) {
			p.err = nil // exited with status 0 once Stop asked
		}
		close(p.done)
	}()
	return p, nil
}

// Name, LogPath (the file of its stdout and stderr) and Pid describe the
// process; Done is closed when it has exited.
func (p *Process) Name() string          { return p.name }
func (p *Process) LogPath() string       { return p.logPath }
func (p *Process) Pid() int              { return p.cmd.Process.Pid }
func (p *Process) Done() <-chan struct{} { return p.done }

// Err returns how the process exited (nil for exit status 0). It is only
// meaningful once Done is closed.
func (p *Process) Err() error {
	if p.exited() {
		return p.err
	}
	return nil
}

func (p *Process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// errPortInUse marks a start that failed because another process took a
// port between FreePorts and the component binding it.
var errPortInUse = errors.New("port already in use")

// exitedError describes an early exit for readiness errors.
func (p *Process) exitedError() error {
	err := fmt.Errorf("%s exited with status 0 (log: %s)", p.name, p.logPath)
	if p.err != nil {
		err = fmt.Errorf("%s exited: %w (log: %s)", p.name, p.err, p.logPath)
	}
	if tail, _ := tailFile(p.logPath, 50); strings.Contains(tail, "address already in use") {
		err = fmt.Errorf("%w: %w", errPortInUse, err)
	}
	return err
}

// Stop sends SIGTERM to the process group, SIGKILL to the process after the
// grace period (ten seconds in a cluster), then SIGKILL to what is left of
// its group. It is safe to call more than once, concurrently; its error is
// nil when the process exited, on its own or by the signal.
func (p *Process) Stop() error {
	p.cancel()
	<-p.done
	if err := syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("kill the group of %s: %w", p.name, err)
	}
	return nil
}

// tailFile returns the last n lines of the file at path, looking at its
// last MiB only.
func tailFile(path string, n int) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer func() { _ = f.Close() }()
	if info, err := f.Stat(); err == nil && info.Size() > 1<<20 {
		_, _ = f.Seek(-1<<20, io.SeekEnd)
	}
	data, err := io.ReadAll(f)
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	return strings.Join(lines[len(lines)-min(n, len(lines)):], "\n"), err
}
