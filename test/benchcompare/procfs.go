package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// userHZ is the unit of utime and stime in /proc/<pid>/stat: USER_HZ, which
// Linux fixes at 100 for user space on every architecture Go runs on.
const userHZ = 100

// cpuSeconds returns the user plus system CPU time of process pid (all its
// threads), from /proc/<pid>/stat.
func cpuSeconds(pid int) (float64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	return parseStatCPU(data)
}

// parseStatCPU reads utime and stime (fields 14 and 15) from the contents
// of /proc/<pid>/stat. The command name (field 2) is in parentheses and may
// hold spaces or parentheses itself, so fields are counted after the last
// closing parenthesis.
func parseStatCPU(data []byte) (float64, error) {
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return 0, fmt.Errorf("malformed stat: no command name")
	}
	fields := strings.Fields(string(data[i+1:]))
	// fields[0] is field 3 (state), so field n is fields[n-3].
	const utime, stime = 14 - 3, 15 - 3
	if len(fields) <= stime {
		return 0, fmt.Errorf("malformed stat: %d fields after the command name", len(fields))
	}
	u, err := strconv.ParseUint(fields[utime], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("utime: %w", err)
	}
	s, err := strconv.ParseUint(fields[stime], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("stime: %w", err)
	}
	return float64(u+s) / userHZ, nil
}

// memory is a process's resident set, in bytes.
type memory struct {
	RSS  uint64 // VmRSS: now
	Peak uint64 // VmHWM: the highest VmRSS so far
	// Anon and File split VmRSS: the heap, stacks and runtime, and the
	// pages of mapped files (the binary's text and data), which the kernel
	// can drop and read back.
	Anon, File uint64
}

// readMemory reads VmRSS, VmHWM, RssAnon and RssFile from /proc/<pid>/status.
func readMemory(pid int) (memory, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return memory{}, err
	}
	return parseStatusMemory(data)
}

func parseStatusMemory(data []byte) (memory, error) {
	var m memory
	fieldOf := map[string]*uint64{"VmRSS": &m.RSS, "VmHWM": &m.Peak, "RssAnon": &m.Anon, "RssFile": &m.File}
	var seen int
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		key, rest, ok := strings.Cut(sc.Text(), ":")
		dst := fieldOf[key]
		if !ok || dst == nil {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) != 2 || fields[1] != "kB" {
			return memory{}, fmt.Errorf("malformed %s line %q", key, sc.Text())
		}
		kb, err := strconv.ParseUint(fields[0], 10, 64)
		if err != nil {
			return memory{}, fmt.Errorf("%s: %w", key, err)
		}
		*dst = kb << 10
		if key == "VmRSS" || key == "VmHWM" {
			seen++
		}
	}
	if seen != 2 {
		return memory{}, fmt.Errorf("status has no VmRSS or VmHWM (a kernel thread or a zombie?)")
	}
	return m, nil
}
