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

// repeatedContainer returns a container name given twice, or "". Pods have
// few containers, so pairs are compared directly.
func repeatedContainer(cs []ContainerPoint) string {
	for i := range cs {
		for j := i + 1; j < len(cs); j++ {
			if cs[i].Name == cs[j].Name {
				return cs[i].Name
			}
		}
	}
	return ""
}
