package group

import (
	"math"

	corev1 "k8s.io/api/core/v1"
)

// Indices of Resources, Usage, Requests and Result.Total.
const (
	CPU    = 0
	Memory = 1
)

// Resources are the resources aggregated, at their indices.
var Resources = [2]corev1.ResourceName{CPU: corev1.ResourceCPU, Memory: corev1.ResourceMemory}

// Usage holds one value per entry of Resources, in integers: CPU in
// nanocores, memory in bytes.
type Usage [2]int64

// Requests is what a pod requests of each entry of Resources as the HPA
// counts it (see Request): Milli is the quantity's MilliValue (millicores;
// thousandths of a byte for memory), Has is false when the HPA would find
// the request missing. An explicit zero is a request of zero.
type Requests struct {
	Milli [2]int64
	Has   [2]bool
}

// PodRequests is Request of pod for every entry of Resources.
func PodRequests(pod *corev1.Pod) Requests {
	var r Requests
	for i, name := range Resources {
		r.Milli[i], r.Has[i] = Request(pod, name)
	}
	return r
}

// usagePerMilli is how many units of Usage one unit of Requests.Milli is:
// a millicore is 10⁶ nanocores, a thousandth of a byte 10⁻³ bytes.
var usagePerMilli = [2]float64{CPU: 1e6, Memory: 1e-3}

// Utilization is usage over a request, both in their units above: the
// fraction of the request used (0.7 = 70%). The request must be above
// zero.
func Utilization(r int, usage, requestMilli int64) float64 {
	return float64(usage) / (float64(requestMilli) * usagePerMilli[r])
}

// Member is one pod of a group as aggregation sees it.
type Member struct {
	// HasUsage is false for a pod without metrics (not running yet, not
	// scraped yet); it is left out of every sum.
	HasUsage bool
	Usage    Usage
	Requests
}

// Value is the member's usage of the resource at index r of Resources as
// the group rule reads it (Combine.Of): its usage, and its request in the
// same units. A member without usage is Missing.
func (m Member) Value(name string, r int) Value {
	v := Value{Name: name, State: Missing}
	if m.HasUsage {
		v.State = Counted
		v.Value = float64(m.Usage[r])
		v.Request, v.HasRequest = float64(m.Milli[r])*usagePerMilli[r], m.Has[r]
	}
	return v
}

// Result is what the leader reports.
type Result struct {
	// Total is the leader's reported usage per resource.
	Total Usage
	// Covered counts the members whose usage went into Total.
	Covered int
}

// Aggregate computes what the leader of a group reports under policy p,
// PolicyGroup or PolicyGroupMax. members is every known pod of the group,
// the leader included; leader is the leader's Member, which must have usage.
//
// For each resource, with the sums over members that have usage and a
// request (a zero request adds its usage and nothing to Σrequest, as in the
// HPA's own sums):
//
//   - PolicyGroup:    Total = Σusage / Σrequest × leader request
//   - PolicyGroupMax: Total = max(usage / request) × leader request, over
//     members with a request above zero
//   - a leader without a request, or with a zero one, or a group whose
//     Σrequest is zero: the group's Σusage (members with usage), so an
//     AverageValue target sees the group's total.
//
// Dividing Total by the leader's request, as the HPA does, gives the
// group's utilization (or its bottleneck's).
func Aggregate(p Policy, leader Member, members []Member) Result {
	var res Result
	values := make([]Value, 0, len(members))
	for i := range Resources {
		values = values[:0]
		var total int64
		for _, m := range members {
			if !m.HasUsage {
				continue
			}
			if i == 0 {
				res.Covered++
			}
			total += m.Usage[i]
			values = append(values, m.Value("", i))
		}
		util, err := p.Combine().Of(values)
		if !leader.Has[i] || leader.Milli[i] <= 0 || err != nil {
			res.Total[i] = total
			continue
		}
		res.Total[i] = int64(math.Round(util * float64(leader.Milli[i]) * usagePerMilli[i]))
	}
	return res
}

// Spread divides total over containers in proportion to weights, so the
// parts add up to total; equal parts when every weight is zero. The last
// part takes the rounding remainder.
func Spread(total int64, weights []float64) []int64 {
	parts := make([]int64, len(weights))
	if len(parts) == 0 {
		return parts
	}
	var sum float64
	for _, w := range weights {
		sum += w
	}
	var assigned int64
	for i := range parts[:len(parts)-1] {
		share := 1 / float64(len(parts))
		if sum > 0 {
			share = weights[i] / sum
		}
		parts[i] = int64(float64(total) * share)
		assigned += parts[i]
	}
	parts[len(parts)-1] = total - assigned
	return parts
}
