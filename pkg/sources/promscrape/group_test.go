package promscrape

import (
	"fmt"
	"math"
	"strings"
	"testing"
)

func TestGroupValue(t *testing.T) {
	counted := func(name string, v float64) Member { return Member{Name: name, State: MemberCounted, Value: v} }
	full := []Member{counted("g-0", 0), counted("g-0-1", 6), counted("g-0-2", 3)}
	tests := []struct {
		name    string
		rule    Combine
		members []Member
		want    float64
		wantErr string
	}{
		{"sum: the empty leader counts 0, the workers' queues add up", CombineSum, full, 9, ""},
		{"mean over every member, the leader included", CombineMean, full, 3, ""},
		{"max: the bottleneck", CombineMax, full, 6, ""},
		{"max of negative values", CombineMax, []Member{counted("a", -3), counted("b", -1)}, -1, ""},
		{"one member", CombineMean, []Member{counted("a", 0.25)}, 0.25, ""},
		{"a Pending member withholds the value", CombineSum, append([]Member{{Name: "g-0-3", State: MemberUnready}}, full...), 0, "member g-0-3 is unready"},
		{"a member without a value withholds it", CombineMax, append(full[:2:2], Member{Name: "g-0-2", State: MemberMissing}), 0, "member g-0-2 is missing"},
		{"a member being deleted withholds it", CombineMean, append(full[:1:1], Member{Name: "g-0-1", State: MemberIgnored}), 0, "member g-0-1 is ignored"},
		{"a non-finite value withholds it", CombineSum, []Member{counted("a", math.NaN())}, 0, "no finite value"},
		{"no members", CombineSum, nil, 0, "no members"},
		{"unknown rule", Combine("median"), full, 0, "unknown combine rule"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := GroupValue(tt.rule, tt.members)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("GroupValue error = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("GroupValue = %v, %v; want %v", got, err, tt.want)
			}
		})
	}
}

func TestMemberStateOf(t *testing.T) {
	tests := []struct {
		phase              string
		deleting, hasValue bool
		want               MemberState
	}{
		{"Running", false, true, MemberCounted},
		{"Running", false, false, MemberMissing},
		{"Pending", false, true, MemberUnready},
		{"Pending", false, false, MemberUnready},
		{"Running", true, true, MemberIgnored},
		{"Failed", false, true, MemberIgnored},
		{"Succeeded", false, false, MemberIgnored},
	}
	for _, tt := range tests {
		if got := MemberStateOf(tt.phase, tt.deleting, tt.hasValue); got != tt.want {
			t.Errorf("MemberStateOf(%s, deleting=%v, value=%v) = %s, want %s", tt.phase, tt.deleting, tt.hasValue, got, tt.want)
		}
	}
}

// TestGroupValueEveryRuleAndState: for each rule, a complete group's value,
// and that one member in each state the HPA does not count at face value
// (Pending, no value, being deleted or failed), wherever it stands in the
// group, the leader included, withholds the value under every rule.
func TestGroupValueEveryRuleAndState(t *testing.T) {
	values := []float64{0, 10, 2.5, 7.5} // leader first, idle
	want := map[Combine]float64{CombineSum: 20, CombineMean: 5, CombineMax: 10}
	for _, rule := range []Combine{CombineSum, CombineMean, CombineMax} {
		members := make([]Member, len(values))
		for i, v := range values {
			members[i] = Member{Name: fmt.Sprintf("g-0-%d", i), State: MemberCounted, Value: v}
		}
		t.Run(string(rule), func(t *testing.T) {
			if got, err := GroupValue(rule, members); err != nil || got != want[rule] {
				t.Fatalf("complete group: %v, %v; want %v", got, err, want[rule])
			}
			for _, state := range []MemberState{MemberUnready, MemberMissing, MemberIgnored} {
				for i := range members {
					withheld := append([]Member(nil), members...)
					withheld[i].State = state
					got, err := GroupValue(rule, withheld)
					wantErr := fmt.Sprintf("member g-0-%d is %s", i, state)
					if err == nil || err.Error() != wantErr {
						t.Errorf("member %d %s: %v, %v; want error %q", i, state, got, err, wantErr)
					}
				}
			}
		})
	}
}
