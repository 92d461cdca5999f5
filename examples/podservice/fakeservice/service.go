// Package fakeservice is an in-memory pod service for tests and demos: it
// answers the API of package podservice and runs nothing. A pod is Pending
// for Options.StartDelay after it is created, then Running with an address
// of its own; each container's log is one line naming the pod; a deleted
// pod is gone once its grace period has passed.
package fakeservice

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/examples/podservice"
)

// Options configure a Service. Zero values take the defaults given.
type Options struct {
	// Capacity is what GET /capacity answers (default 8 CPUs, 32Gi of
	// memory, 110 pods).
	Capacity podservice.Capacity
	// StartDelay is how long a new pod stays Pending.
	StartDelay time.Duration
	// Clock tells the time (default the real clock).
	Clock clock.PassiveClock
}

// Deletion is a DELETE the service was sent.
type Deletion struct {
	Namespace, Name string
	Grace           time.Duration
}

// Service is the in-memory pod service; it is an http.Handler.
type Service struct {
	opts Options
	mux  *http.ServeMux

	mu        sync.Mutex
	pods      map[string]*entry // by namespace/name
	nextIP    int
	deletions []Deletion
}

// entry is one pod the service holds.
type entry struct {
	pod     podservice.Pod // its status as created
	created time.Time
	ip      string
	// gone is when a deleted pod goes; zero while not deleted.
	gone time.Time
}

// New returns a service holding no pods.
func New(o Options) *Service {
	if o.Capacity == (podservice.Capacity{}) {
		o.Capacity = podservice.Capacity{CPU: "8", Memory: "32Gi", Pods: 110}
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	s := &Service{opts: o, mux: http.NewServeMux(), pods: map[string]*entry{}}
	s.mux.HandleFunc("POST /pods", s.create)
	s.mux.HandleFunc("GET /pods", s.list)
	s.mux.HandleFunc("GET /pods/{namespace}/{name}", s.get)
	s.mux.HandleFunc("DELETE /pods/{namespace}/{name}", s.delete)
	s.mux.HandleFunc("GET /pods/{namespace}/{name}/containers/{container}/logs", s.logs)
	s.mux.HandleFunc("GET /capacity", func(w http.ResponseWriter, _ *http.Request) { reply(w, http.StatusOK, s.opts.Capacity) })
	return s
}

func (s *Service) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// Pod returns a pod the service holds, with its status now.
func (s *Service) Pod(namespace, name string) (podservice.Pod, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.lookup(namespace, name)
	if e == nil {
		return podservice.Pod{}, false
	}
	return s.withStatus(e), true
}

// Deletions are the DELETEs the service was sent, in order.
func (s *Service) Deletions() []Deletion {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.deletions)
}

// LogLine is the log of a container of a pod.
func LogLine(namespace, pod, container string) string {
	return fmt.Sprintf("hello from %s/%s, container %s, run by the pod service\n", namespace, pod, container)
}

func (s *Service) create(w http.ResponseWriter, r *http.Request) {
	var pod podservice.Pod
	if err := json.NewDecoder(r.Body).Decode(&pod); err != nil {
		fail(w, http.StatusBadRequest, fmt.Errorf("pod: %w", err))
		return
	}
	if err := validate(&pod); err != nil {
		fail(w, http.StatusBadRequest, err)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lookup(pod.Namespace, pod.Name) != nil {
		fail(w, http.StatusConflict, fmt.Errorf("pod %s/%s exists", pod.Namespace, pod.Name))
		return
	}
	s.nextIP++
	pod.Status = podservice.Status{}
	e := &entry{pod: pod, created: s.opts.Clock.Now(), ip: fmt.Sprintf("10.88.%d.%d", s.nextIP/250, s.nextIP%250+2)}
	s.pods[pod.Namespace+"/"+pod.Name] = e
	reply(w, http.StatusCreated, s.withStatus(e))
}

// validate checks what the service needs of a new pod.
func validate(pod *podservice.Pod) error {
	var errs []error
	for _, f := range []struct{ field, value string }{{"namespace", pod.Namespace}, {"name", pod.Name}, {"uid", pod.UID}} {
		if f.value == "" {
			errs = append(errs, fmt.Errorf("%s: required", f.field))
		}
	}
	if len(pod.Containers) == 0 {
		errs = append(errs, errors.New("containers: at least one is required"))
	}
	for i, c := range pod.Containers {
		if c.Name == "" || c.Image == "" {
			errs = append(errs, fmt.Errorf("containers[%d]: name and image are required", i))
		}
	}
	return errors.Join(errs...)
}

func (s *Service) list(w http.ResponseWriter, r *http.Request) {
	node := r.URL.Query().Get("node")
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sweep()
	out := []podservice.Pod{}
	for _, e := range s.pods {
		if node == "" || e.pod.Node == node {
			out = append(out, s.withStatus(e))
		}
	}
	slices.SortFunc(out, func(a, b podservice.Pod) int {
		return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
	})
	reply(w, http.StatusOK, out)
}

func (s *Service) get(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.found(w, r)
	if e == nil {
		return
	}
	reply(w, http.StatusOK, s.withStatus(e))
}

// delete stops a pod within the grace period asked (default 30 s); a
// second delete may only shorten it.
func (s *Service) delete(w http.ResponseWriter, r *http.Request) {
	grace := int64(30)
	if v := r.URL.Query().Get("gracePeriodSeconds"); v != "" {
		var err error
		if grace, err = strconv.ParseInt(v, 10, 64); err != nil || grace < 0 {
			fail(w, http.StatusBadRequest, fmt.Errorf("gracePeriodSeconds %q: want a whole number of seconds, not negative", v))
			return
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.found(w, r)
	if e == nil {
		return
	}
	s.deletions = append(s.deletions, Deletion{Namespace: e.pod.Namespace, Name: e.pod.Name, Grace: time.Duration(grace) * time.Second})
	gone := s.opts.Clock.Now().Add(time.Duration(grace) * time.Second)
	if e.gone.IsZero() || gone.Before(e.gone) {
		e.gone = gone
	}
	reply(w, http.StatusOK, s.withStatus(e))
	s.sweep()
}

func (s *Service) logs(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	e := s.found(w, r)
	s.mu.Unlock()
	if e == nil {
		return
	}
	container := r.PathValue("container")
	if !slices.ContainsFunc(e.pod.Containers, func(c podservice.Container) bool { return c.Name == container }) {
		fail(w, http.StatusNotFound, fmt.Errorf("pod %s/%s has no container %q", e.pod.Namespace, e.pod.Name, container))
		return
	}
	if v := r.URL.Query().Get("tail"); v != "" {
		if n, err := strconv.Atoi(v); err != nil || n < 1 {
			fail(w, http.StatusBadRequest, fmt.Errorf("tail %q: want a positive number of lines", v))
			return
		}
	}
	// The log is one line: any tail of one line or more is all of it.
	w.Header().Set("Content-Type", "text/plain")
	_, _ = w.Write([]byte(LogLine(e.pod.Namespace, e.pod.Name, container)))
}

// found is the pod the request names, or nil after answering 404. The
// caller holds s.mu.
func (s *Service) found(w http.ResponseWriter, r *http.Request) *entry {
	namespace, name := r.PathValue("namespace"), r.PathValue("name")
	e := s.lookup(namespace, name)
	if e == nil {
		fail(w, http.StatusNotFound, fmt.Errorf("pod %s/%s not found", namespace, name))
	}
	return e
}

// lookup is the pod of that name unless it is gone. The caller holds s.mu.
func (s *Service) lookup(namespace, name string) *entry {
	s.sweep()
	return s.pods[namespace+"/"+name]
}

// sweep forgets the deleted pods whose grace period has passed. The caller
// holds s.mu.
func (s *Service) sweep() {
	now := s.opts.Clock.Now()
	for key, e := range s.pods {
		if !e.gone.IsZero() && !now.Before(e.gone) {
			delete(s.pods, key)
		}
	}
}

// withStatus is the pod with its status now: Pending until the start
// delay has passed, then Running. The caller holds s.mu.
func (s *Service) withStatus(e *entry) podservice.Pod {
	pod := e.pod
	created := e.created
	started := created.Add(s.opts.StartDelay)
	st := podservice.Status{Phase: podservice.PhasePending, IP: e.ip, CreatedAt: &created}
	running := !s.opts.Clock.Now().Before(started)
	if running {
		st.Phase = podservice.PhaseRunning
	}
	for _, c := range pod.Containers {
		cs := podservice.ContainerStatus{Name: c.Name, State: podservice.StateWaiting, Reason: "ContainerCreating"}
		if running {
			cs = podservice.ContainerStatus{Name: c.Name, State: podservice.StateRunning, StartedAt: &started}
		}
		st.Containers = append(st.Containers, cs)
	}
	pod.Status = st
	return pod
}

// reply answers status with v as JSON.
func reply(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// fail answers status with the error, as {"error": "…"}.
func fail(w http.ResponseWriter, status int, err error) {
	reply(w, status, map[string]string{"error": err.Error()})
}
