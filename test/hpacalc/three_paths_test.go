package hpacalc

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/group-metrics-server/group-metrics-server/pkg/group"
	"github.com/group-metrics-server/group-metrics-server/pkg/provider"
)

// TestThreePathsAgree serves each scenario once and reads its leaders on
// the three paths that carry a group's value, each through the HPA's own
// calculator:
//
//  1. metrics.k8s.io under the group policy (a Resource target, as in
//     TestHPACalculatorTwice);
//  2. lws_group_cpu_utilization and lws_group_memory_utilization on the
//     leaders (a Pods target, AverageValue the scenario's target as a
//     fraction);
//  3. a pod-endpoint metric summed over each group on its leader (a Pods
//     target, AverageValue the per-pod target times the group's size).
//
// The one group rule (pkg/group, State) decides on every path which
// leaders have a value: none when a member is Pending, failed, being
// deleted or has no usage, and on path 1 also when a member's CPU sample
// is one the HPA's readiness rule ignores, as the HPA applies that rule to
// Resource CPU, for both resources, since one PodMetrics carries both.
// That set must be exactly the expected one, per path and resource.
//
// Where every leader has a value on a path, the path must decide what the
// HPA decides over every pod as one Deployment, rounded up to whole
// groups: on path 1 with the Resource target and the readiness rule, on
// path 2 with the same Resource target counting every pod at face value
// (the Pods metric has no readiness rule), on path 3 with each pod's own
// value and the per-pod target. The values the HPA read may differ only
// by rounding (a leader's value in whole milli-units, the HPA's truncation
// to a whole percent and of averages), and then the desired replicas only
// as far as that difference moves them.
func TestThreePathsAgree(t *testing.T) {
	now := time.Now().Truncate(time.Second)
	all := labels.SelectorFromSet(labels.Set{group.LabelName: lwsName})
	tallies := []*tally{{name: "metrics.k8s.io"}, {name: "lws_group_*_utilization"}, {name: "pod-endpoint " + queueMetric}}
	resources := []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory}
	utilization := map[corev1.ResourceName]string{corev1.ResourceCPU: provider.MetricCPUUtilization, corev1.ResourceMemory: provider.MetricMemoryUtilization}
	var misplaced int
	for seed := range scenarios {
		s := generate(seed, now)
		p, lister := serve(t, s)
		cm := p.CustomMetrics().WithEndpoints(s.endpointValues(), queueMetrics, window)
		groups, size := int32(s.groups), int32(s.size)
		raw := s.rawMetrics()
		check := func(path *tally, what string, names []string, want []int) bool {
			path.cases++
			got := s.withheld(t, names)
			if !slices.Equal(got, want) {
				misplaced++
				t.Errorf("seed %d, %s: leaders of groups %v have no value, want %v\n%s", seed, what, got, want, s.groupsString(got, want))
			}
			if len(got) > 0 {
				path.withheld++
				return false
			}
			return true
		}

		// Path 1: metrics.k8s.io; one PodMetrics carries both resources.
		a, _ := leaderMetrics(t, p, s)
		var names []string
		for _, m := range a {
			names = append(names, m.Name)
		}
		for _, r := range resources {
			// The leader's PodMetrics carries both resources, so it is
			// withheld whole when the readiness rule ignores a member's
			// CPU (pkg/provider groupContainers says why).
			if !check(tallies[0], fmt.Sprintf("%s %s", tallies[0].name, r), names, s.expectWithheld(true)) {
				continue
			}
			tallies[0].add(t, seed, r, comparison{
				a: calculate(lister, a, groups, s.target, r, leaders, true), b: calculate(lister, raw, groups*size, s.target, r, all, true),
				k: 1, lo: -1, hi: 1, aTarget: int64(s.target), bTarget: int64(s.target), groups: groups, size: size,
			})
		}

		// Path 2: the group utilization metrics on the leaders.
		for _, r := range resources {
			metric := utilization[r]
			list, err := providerPods(cm)(namespace, leaders, metric, labels.Everything())
			if err != nil {
				t.Fatalf("seed %d: %s: %v", seed, metric, err)
			}
			if !check(tallies[1], metric, itemNames(list.Items), s.expectWithheld(false)) {
				continue
			}
			tallies[1].add(t, seed, r, comparison{
				a: metricReplicas(lister, providerPods(cm), groups, 10*int64(s.target), metric, leaders),
				// B counts every pod at face value: the readiness rule off.
				b: calculate(lister, raw, groups*size, s.target, r, all, false),
				// A reads thousandths, B whole percent truncated.
				k: 10, lo: -1, hi: 10, aTarget: 10 * int64(s.target), bTarget: int64(s.target), groups: groups, size: size,
			})
		}

		// Path 3: the pod-endpoint queue, summed over each group.
		list, err := providerPods(cm)(namespace, leaders, queueMetric, labels.Everything())
		if err != nil {
			t.Fatalf("seed %d: %s: %v", seed, queueMetric, err)
		}
		if check(tallies[2], queueMetric, itemNames(list.Items), s.expectWithheld(false)) {
			perPod := 1000 * s.queueTarget()
			tallies[2].add(t, seed, "", comparison{
				a: metricReplicas(lister, providerPods(cm), groups, perPod*int64(size), queueMetric, leaders),
				b: metricReplicas(lister, s.podQueues, groups*size, perPod, queueMetric, all),
				// A averages group sums over leaders, B pods' values
				// over pods, each truncated.
				k: int64(size), lo: 0, hi: int64(size) - 1, aTarget: perPod * int64(size), bTarget: perPod, groups: groups, size: size,
			})
		}
	}
	var parts []string
	for _, p := range tallies {
		parts = append(parts, p.String())
	}
	t.Logf("%d scenarios; %s; %d cases where which leaders have a value breaks the group rule",
		scenarios, strings.Join(parts, "; "), misplaced)
}

// tally counts one path's cases.
type tally struct {
	name                                    string
	cases, valued, exact, rounded, withheld int
}

func (p *tally) String() string {
	return fmt.Sprintf("%s: %d cases, %d with every leader valued (%d exact, %d within rounding), %d with a leader withheld",
		p.name, p.cases, p.valued, p.exact, p.rounded, p.withheld)
}

// add compares a case where every leader has a value.
func (p *tally) add(t *testing.T, seed int, r corev1.ResourceName, c comparison) {
	t.Helper()
	p.valued++
	switch o, why := c.outcome(); o {
	case exact:
		p.exact++
	case rounded:
		p.rounded++
	default:
		t.Errorf("seed %d, %s %s: every leader has a value, but %s\n  A (leaders): %s\n  B (all pods): %s",
			seed, p.name, r, why, c.a, c.b)
	}
}

type outcome int

const (
	exact outcome = iota
	rounded
	differs
)

// comparison is one path's decision on the leaders (A) against the HPA's
// over every pod (B).
type comparison struct {
	a, b reading
	// k scales B's value to A's units; rounding explains
	// lo ≤ A − k·B ≤ hi.
	k, lo, hi int64
	// aTarget and bTarget are the targets in the units of the values.
	aTarget, bTarget int64
	groups, size     int32
}

// outcome is exact when A reads B's value (in B's resolution) and wants
// B's pods in whole groups; rounded when the values differ within the
// rounding and each side's desired groups lie between what the HPA wants
// at the two ratios.
func (c comparison) outcome() (outcome, string) {
	if c.a.err != nil || c.b.err != nil {
		return differs, "a side has an error"
	}
	bGroups := (c.b.replicas + c.size - 1) / c.size
	if d := c.a.usage - c.k*c.b.usage; d < c.lo || d > c.hi {
		return differs, fmt.Sprintf("A's value is %d off %d×B's, beyond rounding [%d, %d]", d, c.k, c.lo, c.hi)
	}
	if c.a.replicas == bGroups && c.a.usage/c.k == c.b.usage {
		return exact, ""
	}
	ra, rb := float64(c.a.usage)/float64(c.aTarget), float64(c.b.usage)/float64(c.bTarget)
	lo, hi := desiredAt(min(ra, rb), c.groups), desiredAt(max(ra, rb), c.groups)
	if c.a.replicas < lo || c.a.replicas > hi || bGroups < lo || bGroups > hi {
		return differs, fmt.Sprintf("A wants %d groups and B %d, outside [%d, %d], what the HPA wants at ratios %.4f and %.4f",
			c.a.replicas, bGroups, lo, hi, ra, rb)
	}
	return rounded, ""
}

// notFaceValue are the states that keep a member from counting at face
// value for every metric; notReadyForCPU those whose CPU sample the
// readiness rule ignores.
var (
	notFaceValue   = []state{pending, failed, deleting, noMetrics, partial}
	notReadyForCPU = []state{loading, justReady, neverReady}
)

// expectWithheld is the groups whose leader the group rule leaves without
// a value, with the readiness rule for CPU or without.
func (s *scenario) expectWithheld(cpu bool) []int {
	var out []int
	for g := range s.groups {
		for _, m := range s.members[g*s.size : (g+1)*s.size] {
			if slices.Contains(notFaceValue, m.state) || (cpu && slices.Contains(notReadyForCPU, m.state)) {
				out = append(out, g)
				break
			}
		}
	}
	return out
}

// withheld is the groups whose leader is not among names, the pods that
// have a value; a name that is not a leader of the scenario, or twice,
// fails the test.
func (s *scenario) withheld(t *testing.T, names []string) []int {
	t.Helper()
	seen := map[string]bool{}
	for _, n := range names {
		if seen[n] {
			t.Errorf("seed %d: %s has a value twice", s.seed, n)
		}
		seen[n] = true
	}
	var out []int
	for g := range s.groups {
		leader := s.members[g*s.size].pod.Name
		if !seen[leader] {
			out = append(out, g)
		}
		delete(seen, leader)
	}
	for n := range seen {
		t.Errorf("seed %d: %s has a value and is no leader", s.seed, n)
	}
	return out
}

// groupsString lists the members of the groups in one set of got and want
// but not the other.
func (s *scenario) groupsString(got, want []int) string {
	var b strings.Builder
	for g := range s.groups {
		if slices.Contains(got, g) == slices.Contains(want, g) {
			continue
		}
		fmt.Fprintf(&b, "  group %d:", g)
		for _, m := range s.members[g*s.size : (g+1)*s.size] {
			fmt.Fprintf(&b, " %s %s", m.pod.Name, m.state)
		}
		b.WriteString("\n")
	}
	return b.String()
}
