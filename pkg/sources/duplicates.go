package sources

import "fmt"

// DropDuplicatePods leaves out every copy of a pod listed more than once in
// one response, and every pod that lists a container twice: which copy is
// right cannot be told, and serving either could be wrong. It returns the
// pods kept, in their order, and one error per pod left out.
func DropDuplicatePods(pods []PodPoint) ([]PodPoint, []error) {
	type key struct{ namespace, name string }
	var (
		problems []error
		counts   map[key]int
	)
	if len(pods) > 1 {
		counts = make(map[key]int, len(pods))
		for i := range pods {
			counts[key{pods[i].Namespace, pods[i].Name}]++
		}
	}
	kept := pods[:0]
	for i := range pods {
		p := &pods[i]
		k := key{p.Namespace, p.Name}
		switch n := counts[k]; {
		case n > 1:
			problems = append(problems, fmt.Errorf("pod %s/%s: listed %d times", p.Namespace, p.Name, n))
			counts[k] = -1 // reported; later copies are dropped silently
			continue
		case n < 0:
			continue
		}
		if c := repeatedContainer(p.Containers); c != "" {
			problems = append(problems, fmt.Errorf("pod %s/%s: container %q listed twice", p.Namespace, p.Name, c))
			continue
		}
		kept = append(kept, *p)
	}
	return kept, problems
}

// repeatedContainer returns a container name given twice, or "". Pods
// have a few containers, which are compared pair by pair; a hostile
// response may list tens of thousands in one pod (10 MiB holds about 90k),
// where pairs would cost seconds per scrape, so past smallPod a set is
// kept.
func repeatedContainer(cs []ContainerPoint) string {
	if len(cs) > smallPod {
		return repeatedBySet(cs)
	}
	return repeatedByPairs(cs)
}

// smallPod is the most containers compared pair by pair: up to it, the
// pairs cost less than the set (BenchmarkRepeatedContainer).
const smallPod = 16

func repeatedByPairs(cs []ContainerPoint) string {
	for i := range cs {
		for j := i + 1; j < len(cs); j++ {
			if cs[i].Name == cs[j].Name {
				return cs[i].Name
			}
		}
	}
	return ""
}

func repeatedBySet(cs []ContainerPoint) string {
	seen := make(map[string]struct{}, len(cs))
	for i := range cs {
		if _, ok := seen[cs[i].Name]; ok {
			return cs[i].Name
		}
		seen[cs[i].Name] = struct{}{}
	}
	return ""
}
