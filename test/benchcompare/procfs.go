package main

import (
	"fmt"

	"github.com/prometheus/procfs"
)

// cpuSeconds returns the user plus system CPU time of process pid (all its
// threads), from /proc/<pid>/stat.
func cpuSeconds(pid int) (float64, error) {
	stat, err := ofProc(procfs.DefaultMountPoint, pid, procfs.Proc.Stat)
	return stat.CPUTime(), err
}

// readMemory reads VmRSS (now), VmHWM (the highest VmRSS so far), and
// RssAnon and RssFile, which split VmRSS into the heap, stacks and runtime,
// and the pages of mapped files (the binary's text and data), from
// /proc/<pid>/status.
func readMemory(pid int) (procfs.ProcStatus, error) {
	return readStatus(procfs.DefaultMountPoint, pid)
}

func readStatus(mount string, pid int) (procfs.ProcStatus, error) {
	status, err := ofProc(mount, pid, procfs.Proc.NewStatus)
	if err == nil && status.VmHWM == 0 {
		err = fmt.Errorf("status of %d has no VmRSS or VmHWM (a kernel thread or a zombie?)", pid)
	}
	return status, err
}

// ofProc reads a file of process pid with read, from the proc file
// system mounted at mount.
func ofProc[T any](mount string, pid int, read func(procfs.Proc) (T, error)) (T, error) {
	var zero T
	fs, err := procfs.NewFS(mount)
	if err != nil {
		return zero, err
	}
	p, err := fs.Proc(pid)
	if err != nil {
		return zero, err
	}
	return read(p)
}
