package group

import (
	"fmt"
	"math"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		phase              corev1.PodPhase
		deleting, hasValue bool
		want               State
	}{
		{corev1.PodRunning, false, true, Counted},
		{corev1.PodRunning, false, false, Missing},
		{corev1.PodRunning, true, true, Ignored},
		{corev1.PodFailed, false, true, Ignored},
		{corev1.PodPending, false, false, Unready},
		{corev1.PodPending, false, true, Unready},
		// The HPA's groupPods names only Failed: a Succeeded pod has no
		// metrics and is missing.
		{corev1.PodSucceeded, false, false, Missing},
	} {
		if got := Classify(tc.phase, tc.deleting, tc.hasValue); got != tc.want {
			t.Errorf("Classify(%s, deleting=%v, hasValue=%v) = %s, want %s", tc.phase, tc.deleting, tc.hasValue, got, tc.want)
		}
	}
}

func TestCombine(t *testing.T) {
	v := func(x float64) Value { return Value{Name: "m", Value: x} }
	r := func(x, request float64) Value { return Value{Name: "m", Value: x, Request: request, HasRequest: true} }
	values := []Value{r(1, 2), r(3, 4), v(8)}
	for _, tc := range []struct {
		name, wantErr string
		rule          Combine
		values        []Value
		want          float64
	}{
		{name: "sum", rule: CombineSum, values: values, want: 12},
		{name: "mean", rule: CombineMean, values: values, want: 4},
		{name: "max", rule: CombineMax, values: values, want: 8},
		{name: "max of negatives", rule: CombineMax, values: []Value{v(-3), v(-1)}, want: -1},
		// Members without a request are left out of both sums.
		{name: "ratio of sums", rule: CombineRatio, values: values, want: 4.0 / 6},
		{name: "max ratio", rule: CombineMaxRatio, values: values, want: 0.75},
		{name: "a zero request adds to the usage only", rule: CombineRatio, values: []Value{r(1, 0), r(1, 4)}, want: 0.5},
		{name: "no request", rule: CombineRatio, values: []Value{v(1), r(1, 0)}, wantErr: "no member requests"},
		{name: "the sum of no members", rule: CombineSum, want: 0},
		{name: "the mean of no members", rule: CombineMean, wantErr: "the mean of nothing is undefined"},
		{name: "the max of no members", rule: CombineMax, wantErr: "the max of nothing is undefined"},
		{name: "the ratio of no members", rule: CombineRatio, wantErr: "the ratio of nothing is undefined"},
		{name: "the max ratio of no members", rule: CombineMaxRatio, wantErr: "the max-ratio of nothing is undefined"},
		{name: "no members of an unknown rule", rule: "median", wantErr: "unknown combine rule"},
		{name: "missing member", rule: CombineSum, values: []Value{v(1), {Name: "w-1", State: Missing}}, wantErr: "member w-1 is missing"},
		{name: "unready member", rule: CombineMax, values: []Value{{Name: "w-2", State: Unready}}, wantErr: "w-2 is unready"},
		{name: "ignored member", rule: CombineMean, values: []Value{{Name: "w-3", State: Ignored}, v(1)}, wantErr: "w-3 is ignored"},
		{name: "infinite member", rule: CombineSum, values: []Value{v(math.Inf(1))}, wantErr: "no finite value"},
		{name: "NaN member", rule: CombineMax, values: []Value{v(math.NaN())}, wantErr: "no finite value"},
		{name: "sum overflows", rule: CombineSum, values: []Value{v(math.MaxFloat64), v(math.MaxFloat64)}, wantErr: "not finite"},
		{name: "unknown rule", rule: "median", values: values, wantErr: "unknown combine rule"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.rule.Of(tc.values)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Of = %v, %v; want an error with %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || math.Abs(got-tc.want) > 1e-12 {
				t.Fatalf("Of = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

func TestScope(t *testing.T) {
	for _, tc := range []struct {
		in             string
		leader, worker bool
	}{
		{"", true, true}, {"all", true, true}, {"leader", true, false}, {"workers", false, true},
	} {
		if s, err := ParseScope(tc.in); err != nil || s.Includes(true) != tc.leader || s.Includes(false) != tc.worker {
			t.Errorf("ParseScope(%q) = %q (%v): includes leader %v, worker %v; want %v, %v",
				tc.in, s, err, s.Includes(true), s.Includes(false), tc.leader, tc.worker)
		}
	}
	if _, err := ParseScope("followers"); err == nil {
		t.Error("ParseScope(followers) should fail")
	}
}

// TestCombineEveryRuleAndState: for each rule, a complete group's value,
// and that one member in each state the HPA does not count at face value,
// wherever it stands in the group, the leader included, withholds the
// value under every rule.
func TestCombineEveryRuleAndState(t *testing.T) {
	values := []float64{0, 10, 2.5, 7.5} // leader first, idle
	requests := []float64{10, 10, 5, 25}
	want := map[Combine]float64{CombineSum: 20, CombineMean: 5, CombineMax: 10, CombineRatio: 0.4, CombineMaxRatio: 1}
	for rule, wantValue := range want {
		members := make([]Value, len(values))
		for i, v := range values {
			members[i] = Value{Name: fmt.Sprintf("g-0-%d", i), Value: v, Request: requests[i], HasRequest: true}
		}
		t.Run(string(rule), func(t *testing.T) {
			if got, err := rule.Of(members); err != nil || math.Abs(got-wantValue) > 1e-12 {
				t.Fatalf("complete group: %v, %v; want %v", got, err, wantValue)
			}
			for _, state := range []State{Unready, Missing, Ignored} {
				for i := range members {
					withheld := append([]Value(nil), members...)
					withheld[i].State = state
					got, err := rule.Of(withheld)
					if wantErr := fmt.Sprintf("member g-0-%d is %s", i, state); err == nil || err.Error() != wantErr {
						t.Errorf("member %d %s: %v, %v; want error %q", i, state, got, err, wantErr)
					}
				}
			}
		})
	}
}
