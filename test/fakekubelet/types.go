package fakekubelet

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// The types below mirror the kubelet Summary API (stats/v1alpha1) field for
// field, for the fields the fake fills in. Timestamps are metav1.Time, which
// encodes as RFC 3339 in UTC with second precision, as the kubelet does.

// Summary is the body of GET /stats/summary.
type Summary struct {
	Node NodeStats  `json:"node"`
	Pods []PodStats `json:"pods"`
}

// NodeStats holds node-level stats.
type NodeStats struct {
	NodeName         string           `json:"nodeName"`
	SystemContainers []ContainerStats `json:"systemContainers,omitempty"`
	StartTime        metav1.Time      `json:"startTime"`
	CPU              *CPUStats        `json:"cpu,omitempty"`
	Memory           *MemoryStats     `json:"memory,omitempty"`
	Network          *NetworkStats    `json:"network,omitempty"`
	Fs               *FsStats         `json:"fs,omitempty"`
	Rlimit           *RlimitStats     `json:"rlimit,omitempty"`
}

// PodStats holds pod-level stats.
type PodStats struct {
	PodRef           PodReference     `json:"podRef"`
	StartTime        metav1.Time      `json:"startTime"`
	Containers       []ContainerStats `json:"containers"`
	CPU              *CPUStats        `json:"cpu,omitempty"`
	Memory           *MemoryStats     `json:"memory,omitempty"`
	Network          *NetworkStats    `json:"network,omitempty"`
	EphemeralStorage *FsStats         `json:"ephemeral-storage,omitempty"`
}

// ContainerStats holds container-level stats.
type ContainerStats struct {
	Name      string       `json:"name"`
	StartTime metav1.Time  `json:"startTime"`
	CPU       *CPUStats    `json:"cpu,omitempty"`
	Memory    *MemoryStats `json:"memory,omitempty"`
	Rootfs    *FsStats     `json:"rootfs,omitempty"`
	Logs      *FsStats     `json:"logs,omitempty"`
}

// PodReference identifies a pod.
type PodReference struct {
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
	UID       string `json:"uid"`
}

// CPUStats: UsageNanoCores is the current rate in core-nanoseconds per second;
// UsageCoreNanoSeconds is cumulative since the container (re)started.
type CPUStats struct {
	Time                 metav1.Time `json:"time"`
	UsageNanoCores       *uint64     `json:"usageNanoCores,omitempty"`
	UsageCoreNanoSeconds *uint64     `json:"usageCoreNanoSeconds,omitempty"`
}

// MemoryStats are in bytes, except the page fault counts.
type MemoryStats struct {
	Time            metav1.Time `json:"time"`
	AvailableBytes  *uint64     `json:"availableBytes,omitempty"`
	UsageBytes      *uint64     `json:"usageBytes,omitempty"`
	WorkingSetBytes *uint64     `json:"workingSetBytes,omitempty"`
	RSSBytes        *uint64     `json:"rssBytes,omitempty"`
	PageFaults      *uint64     `json:"pageFaults,omitempty"`
	MajorPageFaults *uint64     `json:"majorPageFaults,omitempty"`
}

// NetworkStats describes the default interface and all interfaces.
type NetworkStats struct {
	Time metav1.Time `json:"time"`
	InterfaceStats
	Interfaces []InterfaceStats `json:"interfaces,omitempty"`
}

// InterfaceStats are cumulative per-interface counters.
type InterfaceStats struct {
	Name     string  `json:"name"`
	RxBytes  *uint64 `json:"rxBytes,omitempty"`
	RxErrors *uint64 `json:"rxErrors,omitempty"`
	TxBytes  *uint64 `json:"txBytes,omitempty"`
	TxErrors *uint64 `json:"txErrors,omitempty"`
}

// FsStats describes filesystem usage in bytes and inodes.
type FsStats struct {
	Time           metav1.Time `json:"time"`
	AvailableBytes *uint64     `json:"availableBytes,omitempty"`
	CapacityBytes  *uint64     `json:"capacityBytes,omitempty"`
	UsedBytes      *uint64     `json:"usedBytes,omitempty"`
	InodesFree     *uint64     `json:"inodesFree,omitempty"`
	Inodes         *uint64     `json:"inodes,omitempty"`
	InodesUsed     *uint64     `json:"inodesUsed,omitempty"`
}

// RlimitStats describes process limits of the node.
type RlimitStats struct {
	Time                  metav1.Time `json:"time"`
	MaxPID                *int64      `json:"maxpid,omitempty"`
	NumOfRunningProcesses *int64      `json:"curproc,omitempty"`
}
