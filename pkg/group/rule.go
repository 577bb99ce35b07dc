package group

import (
	"fmt"
	"math"

	corev1 "k8s.io/api/core/v1"
)

// State is how the HPA counts one pod for one metric. It follows groupPods
// in k8s.io/kubernetes v1.37.2 pkg/controller/podautoscaler/replica_calculator.go,
// which every metric type goes through: a pod being deleted or failed is
// ignored, a Pending pod is unready, a pod without a value is missing, and
// for CPU alone a sample that the readiness rule (Readiness.IgnoresCPU)
// ignores makes the pod unready.
//
// A group's value is the same for every kind of metric the server serves
// on a leader (resource metrics, the lws_group_* custom metrics and the
// pod-endpoint metrics): it exists only when every member in scope counts
// at face value. One member the HPA would not count withholds the whole
// group's value, so the HPA's own missing-pod rule applies to the leader
// rather than a partial sum that looks like low load
// (docs/lws-autoscaling.md).
type State uint8

const (
	// Counted has a value the HPA counts at face value.
	Counted State = iota
	// Unready is Pending or, for CPU, has a sample the readiness rule
	// ignores.
	Unready
	// Missing runs without a value: not scraped yet, failing, or no
	// matching series.
	Missing
	// Ignored is being deleted or has failed.
	Ignored
)

func (s State) String() string {
	switch s {
	case Counted:
		return "counted"
	case Unready:
		return "unready"
	case Missing:
		return "missing"
	}
	return "ignored"
}

// Classify is the state of a pod of phase that is being deleted or not and
// has a value or not, before the readiness rule for CPU (which the caller
// applies to a Counted pod's CPU sample).
func Classify(phase corev1.PodPhase, deleting, hasValue bool) State {
	switch {
	case deleting || phase == corev1.PodFailed:
		return Ignored
	case phase == corev1.PodPending:
		return Unready
	case !hasValue:
		return Missing
	}
	return Counted
}

// Combine is how several values become one: the members of a group, the
// groups of a LeaderWorkerSet, the series of one pod.
type Combine string

const (
	// CombineSum adds the values up (queue lengths, usage).
	CombineSum Combine = "sum"
	// CombineMean averages them (usage fractions, utilization).
	CombineMean Combine = "mean"
	// CombineMax takes the highest (the bottleneck).
	CombineMax Combine = "max"
	// CombineRatio is Σvalue / Σrequest over the values that have a
	// request: a group's utilization, as the HPA computes a utilization
	// over pods (the "group" policy of resource metrics).
	CombineRatio Combine = "ratio"
	// CombineMaxRatio is the highest value / request of any one value
	// with a request above zero: the busiest member's utilization (the
	// "group-max" policy).
	CombineMaxRatio Combine = "max-ratio"
)

// Value is one member's value for Combine.Of.
type Value struct {
	// Name names the member in errors.
	Name  string
	State State
	// Value is read only when State is Counted.
	Value float64
	// Request, when HasRequest, is the denominator of the ratio rules, in
	// Value's units. A zero request adds Value and nothing to Σrequest, as
	// in the HPA's own sums.
	Request    float64
	HasRequest bool
}

// Of combines values under c. The sum of no values is 0: a
// LeaderWorkerSet scaled to zero groups has no queue, no usage, no demand
// (an HPA that scaled it to zero reads that to stay there, and the first
// demand to come back). There is no value, and the error says why, when
// values is empty under any other rule (the mean, the max or a ratio of
// nothing is undefined), when any value does not count at face value or is
// not finite, when a ratio rule has no request to divide by, or when the
// result is not finite.
func (c Combine) Of(values []Value) (float64, error) {
	if len(values) == 0 {
		switch c {
		case CombineSum:
			return 0, nil
		case CombineMean, CombineMax, CombineRatio, CombineMaxRatio:
			return 0, fmt.Errorf("no members: the %s of nothing is undefined", c)
		}
		return 0, fmt.Errorf("unknown combine rule %q", c)
	}
	if err := AllCounted(values); err != nil {
		return 0, err
	}
	var sum, maxV, sumWithRequest, sumRequest, maxRatio float64
	for i, v := range values {
		if !finite(v.Value) || (v.HasRequest && !finite(v.Request)) {
			return 0, fmt.Errorf("member %s has no finite value", v.Name)
		}
		sum += v.Value
		if i == 0 || v.Value > maxV {
			maxV = v.Value
		}
		if v.HasRequest {
			sumWithRequest += v.Value
			sumRequest += v.Request
			if v.Request > 0 {
				maxRatio = max(maxRatio, v.Value/v.Request)
			}
		}
	}
	var out float64
	switch c {
	case CombineSum:
		out = sum
	case CombineMean:
		out = sum / float64(len(values))
	case CombineMax:
		out = maxV
	case CombineRatio, CombineMaxRatio:
		if sumRequest <= 0 {
			return 0, fmt.Errorf("no member requests anything to divide by")
		}
		out = sumWithRequest / sumRequest
		if c == CombineMaxRatio {
			out = maxRatio
		}
	default:
		return 0, fmt.Errorf("unknown combine rule %q", c)
	}
	if !finite(out) {
		return 0, fmt.Errorf("the %s of the members is not finite", c)
	}
	return out, nil
}

func finite(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }

// AllCounted is nil when every value counts at face value, else an error
// naming the first that does not: the rule every combination holds to,
// Of's and a histogram's pooled parts' alike.
func AllCounted(values []Value) error {
	for _, v := range values {
		if v.State != Counted {
			return fmt.Errorf("member %s is %s", v.Name, v.State)
		}
	}
	return nil
}

// Scope is which members of a group a metric reads.
type Scope string

const (
	// ScopeAll reads every member: data-parallel layouts, where each pod
	// runs its own engine.
	ScopeAll Scope = "all"
	// ScopeLeader reads the leader only: multi-node engines that serve
	// their metrics on the leader (the LWS project's vLLM and SGLang
	// examples, whose workers run Ray or a non-zero rank).
	ScopeLeader Scope = "leader"
	// ScopeWorkers reads every member but the leader.
	ScopeWorkers Scope = "workers"
)

// ParseScope accepts the scope names; "" is ScopeAll.
func ParseScope(s string) (Scope, error) {
	switch sc := Scope(s); sc {
	case "":
		return ScopeAll, nil
	case ScopeAll, ScopeLeader, ScopeWorkers:
		return sc, nil
	}
	return "", fmt.Errorf("unknown member scope %q: want %s, %s or %s", s, ScopeAll, ScopeLeader, ScopeWorkers)
}

// Includes says whether a member, the group's leader or not, is in scope.
// A member out of scope is neither read nor missing.
func (s Scope) Includes(leader bool) bool {
	switch s {
	case ScopeLeader:
		return leader
	case ScopeWorkers:
		return !leader
	}
	return true
}
