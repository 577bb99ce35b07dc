package promscrape

import (
	"fmt"
	"math"
)

// MemberState is how the HPA would count one member of a group for a
// metric that is not CPU. It follows groupPods in k8s.io/kubernetes v1.37.2
// pkg/controller/podautoscaler/replica_calculator.go: a pod being deleted
// or failed is ignored; a Pending pod is unready; a pod without a value is
// missing; any other pod (Running, whether Ready or not, since the
// readiness rule applies to CPU only) counts at face value.
type MemberState int

const (
	// MemberCounted has a value the HPA would count.
	MemberCounted MemberState = iota
	// MemberUnready is Pending.
	MemberUnready
	// MemberMissing is Running without a value (not scraped yet, endpoint
	// failing, series absent).
	MemberMissing
	// MemberIgnored is being deleted or failed.
	MemberIgnored
)

func (s MemberState) String() string {
	switch s {
	case MemberCounted:
		return "counted"
	case MemberUnready:
		return "unready"
	case MemberMissing:
		return "missing"
	default:
		return "ignored"
	}
}

// Member is one pod of a group for one metric.
type Member struct {
	Name  string
	State MemberState
	// Value is the member's value; read only when State is MemberCounted.
	Value float64
}

// MemberStateOf classifies a member from its pod's phase and whether a
// value was found for it.
func MemberStateOf(phase string, deleting, hasValue bool) MemberState {
	switch {
	case deleting || phase == "Failed" || phase == "Succeeded":
		return MemberIgnored
	case phase == "Pending":
		return MemberUnready
	case !hasValue:
		return MemberMissing
	}
	return MemberCounted
}

// GroupValue combines the members of one group under rule. As for the
// group's CPU and memory (docs/lws-autoscaling.md), the group has a value
// only when every member counts at face value: one unready, missing or
// ignored member makes the whole group's value missing, so the HPA's own
// missing-pod rule applies to the leader rather than a partial sum that
// looks like low load. The error names the first member that withheld the
// value. A group without members has no value either.
func GroupValue(rule Combine, members []Member) (float64, error) {
	if len(members) == 0 {
		return 0, fmt.Errorf("group has no members")
	}
	var sum, maxV float64
	for i, m := range members {
		if m.State != MemberCounted {
			return 0, fmt.Errorf("member %s is %s", m.Name, m.State)
		}
		if math.IsNaN(m.Value) || math.IsInf(m.Value, 0) {
			return 0, fmt.Errorf("member %s has no finite value (%v)", m.Name, m.Value)
		}
		sum += m.Value
		if i == 0 || m.Value > maxV {
			maxV = m.Value
		}
	}
	switch rule {
	case CombineSum:
		return sum, nil
	case CombineMean:
		return sum / float64(len(members)), nil
	case CombineMax:
		return maxV, nil
	}
	return 0, fmt.Errorf("unknown combine rule %q", rule)
}
