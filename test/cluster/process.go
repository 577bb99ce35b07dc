package cluster

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
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
	logFile *os.File
	grace   time.Duration

	done chan struct{}
	err  error // set before done is closed

	stopOnce sync.Once
	stopErr  error
}

// startProcess starts path with args, appending its output to logPath.
func startProcess(name, logPath string, env []string, path string, args ...string) (*Process, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open log for %s: %w", name, err)
	}
	fmt.Fprintf(logFile, "### %s %s\n", path, strings.Join(args, " "))

	cmd := exec.Command(path, args...)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.Stdin = nil
	if env != nil {
		cmd.Env = env
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Setpgid:   true,
		Pdeathsig: syscall.SIGKILL,
	}
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		return nil, fmt.Errorf("start %s (%s): %w", name, path, err)
	}
	p := &Process{
		name:    name,
		logPath: logPath,
		cmd:     cmd,
		logFile: logFile,
		grace:   stopGracePeriod,
		done:    make(chan struct{}),
	}
	go func() {
		err := cmd.Wait()
		_ = logFile.Close()
		p.err = err
		close(p.done)
	}()
	return p, nil
}

// Name returns the name the process was started with.
func (p *Process) Name() string { return p.name }

// LogPath returns the file that receives the process's stdout and stderr.
func (p *Process) LogPath() string { return p.logPath }

// Pid returns the operating-system process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Done is closed when the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Err returns how the process exited (nil for exit status 0). It is only
// meaningful once Done is closed.
func (p *Process) Err() error {
	select {
	case <-p.done:
		return p.err
	default:
		return nil
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

// Stop sends SIGTERM to the process group, waits up to ten seconds, then kills
// the group with SIGKILL and waits for the process to be reaped. It is safe to
// call more than once and from several goroutines. The returned error is nil
// when the process exited on its own or because of the signal.
func (p *Process) Stop() error {
	p.stopOnce.Do(func() {
		p.stopErr = p.stop()
	})
	return p.stopErr
}

func (p *Process) stop() error {
	pgid := p.cmd.Process.Pid
	select {
	case <-p.done:
		// The leader is gone but children in its group may remain.
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		return nil
	default:
	}
	if err := syscall.Kill(-pgid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("signal %s: %w", p.name, err)
	}
	timer := time.NewTimer(p.grace)
	defer timer.Stop()
	select {
	case <-p.done:
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		return nil
	case <-timer.C:
	}
	if err := syscall.Kill(-pgid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("kill %s: %w", p.name, err)
	}
	<-p.done
	return nil
}

// tailFile returns the last n lines of the file at path.
func tailFile(path string, n int) (string, error) {
	const maxRead = 1 << 20
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer func() { _ = f.Close() }()
	info, err := f.Stat()
	if err != nil {
		return "", err
	}
	if _, err := f.Seek(max(info.Size()-maxRead, 0), io.SeekStart); err != nil {
		return "", err
	}
	data, err := io.ReadAll(f)
	if err != nil {
		return "", err
	}
	data = bytes.TrimRight(data, "\n")
	lines := bytes.Split(data, []byte("\n"))
	if n >= 0 && len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n"))), nil
}

// logTails formats the last n lines of every process's log, in order.
func logTails(procs []*Process, n int) string {
	var b strings.Builder
	for _, p := range procs {
		fmt.Fprintf(&b, "==> %s (%s) <==\n", p.name, filepath.Base(p.logPath))
		tail, err := tailFile(p.logPath, n)
		if err != nil {
			fmt.Fprintf(&b, "(cannot read log: %v)\n", err)
			continue
		}
		b.WriteString(tail)
		b.WriteString("\n")
	}
	return b.String()
}
