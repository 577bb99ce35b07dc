package env

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// userHZ is the unit of the CPU times in /proc/<pid>/stat: the kernel
// reports them in USER_HZ ticks, 100 per second on every Linux architecture
// Go supports.
const userHZ = 100

// ProcStats is what /proc says about one process.
type ProcStats struct {
	// RSS is VmRSS from /proc/<pid>/status, in bytes.
	RSS uint64
	// CPU is user plus system time from /proc/<pid>/stat.
	CPU time.Duration
}

// ReadProc reads the resident set size and CPU time of pid.
func ReadProc(pid int) (ProcStats, error) {
	var st ProcStats
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return st, err
	}
	if st.RSS, err = vmRSS(string(status)); err != nil {
		return st, fmt.Errorf("/proc/%d/status: %w", pid, err)
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return st, err
	}
	if st.CPU, err = cpuTime(string(stat)); err != nil {
		return st, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	return st, nil
}

// vmRSS parses the "VmRSS:   1234 kB" line of /proc/<pid>/status.
func vmRSS(status string) (uint64, error) {
	for _, line := range strings.Split(status, "\n") {
		rest, ok := strings.CutPrefix(line, "VmRSS:")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return 0, fmt.Errorf("unexpected VmRSS line %q", line)
		}
		kb, err := strconv.ParseUint(f[0], 10, 64)
		return kb << 10, err
	}
	return 0, fmt.Errorf("no VmRSS line")
}

// cpuTime parses utime and stime, fields 14 and 15 of /proc/<pid>/stat. The
// command name (field 2) is in parentheses and may hold spaces, so fields
// are counted from the last ')'.
func cpuTime(stat string) (time.Duration, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("no command name")
	}
	f := strings.Fields(stat[i+1:])
	// f[0] is field 3 (state), so field n is f[n-3].
	if len(f) < 13 {
		return 0, fmt.Errorf("%d fields after the command name", len(f))
	}
	var ticks uint64
	for _, s := range f[11:13] {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return 0, err
		}
		ticks += v
	}
	return time.Duration(ticks) * time.Second / userHZ, nil
}
