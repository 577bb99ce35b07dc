package env

import (
	"time"

	"github.com/prometheus/procfs"
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
	// Start is when the process started, in Unix seconds, computed as the
	// Prometheus process collector does (with the same library): the boot
	// time from /proc/stat plus the start time in ticks from
	// /proc/<pid>/stat.
	Start float64
}

// ReadProc reads the resident set size, CPU time and start time of pid.
func ReadProc(pid int) (ProcStats, error) {
	p, err := procfs.NewProc(pid)
	if err != nil {
		return ProcStats{}, err
	}
	status, err := p.NewStatus()
	if err != nil {
		return ProcStats{}, err
	}
	stat, err := p.Stat()
	if err != nil {
		return ProcStats{}, err
	}
	start, err := stat.StartTime()
	if err != nil {
		return ProcStats{}, err
	}
	return ProcStats{RSS: status.VmRSS, CPU: time.Duration(stat.UTime+stat.STime) * time.Second / userHZ, Start: start}, nil
}
