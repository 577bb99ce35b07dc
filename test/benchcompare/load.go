package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// listShape is one kind of list request.
type listShape struct {
	name string
	// p50 and p99 are the figure keys.
	p50, p99 string
	// path returns the request path for a client's next request.
	path func(rng *rand.Rand) string
}

// listLoads are the loads timed one after the other; the shapes of one
// load are sent interleaved, each client alternating between them, so
// that each sees the same conditions on the machine (a scrape cycle, the
// garbage of the load before).
func (b *bench) listLoads() [][]listShape {
	return [][]listShape{
		{{
			name: "all pods, all namespaces",
			p50:  figListAllP50, p99: figListAllP99,
			path: func(*rand.Rand) string { return "/apis/metrics.k8s.io/v1beta1/pods" },
		}},
		{
			{
				name: "namespaced label selector (as the HPA sends)",
				p50:  figSelectorP50, p99: figSelectorP99,
				path: func(rng *rand.Rand) string {
					a := b.apps[rng.IntN(len(b.apps))]
					return selectorPath(a.namespace, a.name)
				},
			},
			{
				// The floor of the request above: the same handler chain
				// (authentication, authorization, request info, the list
				// handler, encoding) for a namespace without pods, where
				// the provider has nothing to do.
				name: "floor: namespaced label selector in a namespace without pods",
				p50:  figFloorP50, p99: figFloorP99,
				path: func(rng *rand.Rand) string { return selectorPath(floorNamespace, b.apps[rng.IntN(len(b.apps))].name) },
			},
		},
	}
}

// selectorPath lists the pods of app in namespace, as the HPA does.
func selectorPath(namespace, app string) string {
	return "/apis/metrics.k8s.io/v1beta1/namespaces/" + namespace + "/pods?labelSelector=app%3D" + app
}

// floorNamespace holds no pods and need not exist: both servers answer an
// empty list for it.
const floorNamespace = "bench-floor-empty"

// listLoad checks what each list shape returns, then times each shape under
// Clients concurrent clients for LoadDuration or LoadMaxRequests requests,
// whichever ends first. With profiles asked for, a CPU profile covers the
// first LoadDuration of the load (the list of all pods) and a heap profile
// is taken after it.
func (b *bench) listLoad(ctx context.Context, s *runningServer, res *roundResult, prof *profiler) error {
	if err := b.checkLists(ctx, s, res); err != nil {
		return err
	}
	waitProfile := prof.startCPU(ctx, "load", b.opts.LoadDuration)
	for i, shapes := range b.listLoads() {
		// Seeded per round and load, so both servers get the same requests.
		seed := uint64(res.round*10 + i)
		stats, err := runLoad(ctx, s, b.opts.Clients, b.opts.LoadDuration, len(shapes)*b.opts.LoadMaxRequests, seed, shapes)
		if err != nil {
			return err
		}
		for j, shape := range shapes {
			st := stats[j]
			res.values[shape.p50] = st.p50
			res.values[shape.p99] = st.p99
			res.notef("list %s: %d requests (%d failed) in %v, %.1f/s, p50 %.1f ms, p99 %.1f ms, max %.1f ms, %.0f KiB per answer",
				shape.name, st.ok, st.failed, st.took.Round(time.Millisecond), float64(st.ok)/st.took.Seconds(),
				st.p50, st.p99, st.max, st.meanBytes/1024)
			b.logf("round %d: %s: list %s: %d requests, p50 %.1f ms, p99 %.1f ms", res.round, s.kind.name,
				shape.name, st.ok, st.p50, st.p99)
			if st.failed > 0 {
				res.notef("FAILED requests: %d of %d (first: %s)", st.failed, st.ok+st.failed, st.firstErr)
			}
		}
	}
	if err := waitProfile(); err != nil {
		return err
	}
	return prof.heap(ctx, "load")
}

// checkLists makes sure both shapes answer what they should before they are
// timed: every pod of the workload, and exactly one app's pods.
func (b *bench) checkLists(ctx context.Context, s *runningServer, res *roundResult) error {
	all, err := s.countItems(ctx, "/apis/metrics.k8s.io/v1beta1/pods")
	if err != nil {
		return err
	}
	res.values[figListed] = float64(all)
	if all < b.opts.totalPods() {
		res.notef("MISSING: the list of all pods has %d items of %d", all, b.opts.totalPods())
	}
	a := b.apps[0]
	n, err := s.countItems(ctx, selectorPath(a.namespace, a.name))
	if err != nil {
		return err
	}
	if n != b.opts.PodsPerApp {
		res.notef("MISSING: the selector list of app %s/%s has %d items of %d", a.namespace, a.name, n, b.opts.PodsPerApp)
	}
	res.notef("lists checked: all pods %d items (of %d), app=%s in %s %d items (of %d)",
		all, b.opts.totalPods(), a.name, a.namespace, n, b.opts.PodsPerApp)
	return nil
}

func (s *runningServer) countItems(ctx context.Context, path string) (int, error) {
	var list struct {
		Items []json.RawMessage `json:"items"`
	}
	body, err := s.getOK(ctx, path)
	if err != nil {
		return 0, err
	}
	if err := json.Unmarshal([]byte(body), &list); err != nil {
		return 0, fmt.Errorf("%s: list %s: %w", s.kind.name, path, err)
	}
	return len(list.Items), nil
}

// loadStats are the results of one load run; latencies in milliseconds.
type loadStats struct {
	ok, failed    int
	firstErr      string
	p50, p99, max float64
	meanBytes     float64
	took          time.Duration
}

// runLoad runs clients goroutines that each send one request at a time until
// duration has passed or maxRequests have been started in all. A client's
// k-th request is of shapes[k % len(shapes)]; the stats are per shape.
func runLoad(ctx context.Context, s *runningServer, clients int, duration time.Duration, maxRequests int, seed uint64, shapes []listShape) ([]loadStats, error) {
	const requestTimeout = 30 * time.Second
	var (
		started atomic.Int64
		mu      sync.Mutex
		lat     = make([][]float64, len(shapes))
		bytes   = make([]int64, len(shapes))
		st      = make([]loadStats, len(shapes))
		wg      sync.WaitGroup
	)
	began := time.Now()
	deadline := began.Add(duration)
	for c := range clients {
		rng := rand.New(rand.NewPCG(seed, uint64(c)))
		wg.Go(func() {
			for k := 0; time.Now().Before(deadline) && started.Add(1) <= int64(maxRequests) && ctx.Err() == nil; k++ {
				which := k % len(shapes)
				p := shapes[which].path(rng)
				reqCtx, cancel := context.WithTimeout(ctx, requestTimeout)
				t0 := time.Now()
				var n int64
				code, _, err := s.get(reqCtx, p, &n)
				d := time.Since(t0)
				cancel()
				mu.Lock()
				switch {
				case err == nil && code == http.StatusOK:
					lat[which] = append(lat[which], float64(d)/float64(time.Millisecond))
					bytes[which] += n
				default:
					st[which].failed++
					if st[which].firstErr == "" {
						st[which].firstErr = fmt.Sprintf("GET %s: code %d, error %v", p, code, err)
					}
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return st, err
	}
	took := time.Since(began)
	for i := range st {
		st[i].took = took
		st[i].ok = len(lat[i])
		if st[i].ok == 0 {
			return st, fmt.Errorf("%s: no request succeeded (%d failed; first: %s)", s.kind.name, st[i].failed, st[i].firstErr)
		}
		st[i].p50 = percentile(lat[i], 50)
		st[i].p99 = percentile(lat[i], 99)
		st[i].max = percentile(lat[i], 100)
		st[i].meanBytes = float64(bytes[i]) / float64(st[i].ok)
	}
	return st, nil
}
