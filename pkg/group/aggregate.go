package group

import (
	corev1 "k8s.io/api/core/v1"
)

// Resources are the resources aggregated, in the order of Amounts.
var Resources = [2]corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory}

// Amounts holds one value per entry of Resources: CPU in cores, memory in
// bytes.
type Amounts [2]float64

// Member is one pod of a group as aggregation sees it.
type Member struct {
	// HasUsage is false for a pod without metrics (not running yet, not
	// scraped yet); it is left out of every sum.
	HasUsage bool
	Usage    Amounts
	// HasRequest[i] is false when the HPA would find the request for
	// Resources[i] missing; an explicit zero is a request of zero.
	HasRequest [2]bool
	Request    Amounts
}

// Result is what the leader reports.
type Result struct {
	// Total is the leader's reported usage per resource.
	Total Amounts
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
	for _, m := range members {
		if m.HasUsage {
			res.Covered++
		}
	}
	for i := range Resources {
		var sumUsage, sumRequest, maxUtil, total float64
		for _, m := range members {
			if !m.HasUsage {
				continue
			}
			total += m.Usage[i]
			if !m.HasRequest[i] {
				continue
			}
			sumUsage += m.Usage[i]
			sumRequest += m.Request[i]
			if m.Request[i] > 0 {
				maxUtil = max(maxUtil, m.Usage[i]/m.Request[i])
			}
		}
		if !leader.HasRequest[i] || leader.Request[i] <= 0 || sumRequest <= 0 {
			res.Total[i] = total
			continue
		}
		util := sumUsage / sumRequest
		if p == PolicyGroupMax {
			util = maxUtil
		}
		res.Total[i] = util * leader.Request[i]
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
