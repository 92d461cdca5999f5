package fakeservice

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"
)

// do sends one request to s and returns the answer's status and body.
func do(s *Service, method, target, body string) (int, string) {
	w := httptest.NewRecorder()
	s.ServeHTTP(w, httptest.NewRequest(method, target, strings.NewReader(body)))
	return w.Code, w.Body.String()
}

func TestCreateNamesWhatIsMissing(t *testing.T) {
	s := New(Options{})
	code, body := do(s, http.MethodPost, "/pods", `{"namespace":"ns","containers":[{"name":"app"}]}`)
	if code != http.StatusBadRequest {
		t.Fatalf("POST of a pod without name: %d %s, want 400", code, body)
	}
	for _, want := range []string{"name: required", "uid: required", "containers[0]: name and image are required"} {
		if !strings.Contains(body, want) {
			t.Errorf("answer %s does not say %q", body, want)
		}
	}
}

// A second DELETE may shorten the grace period, never lengthen it.
func TestDeleteGracePeriod(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Date(2026, 11, 26, 22, 0, 0, 0, time.UTC))
	s := New(Options{Clock: clk})
	if code, body := do(s, http.MethodPost, "/pods", `{"node":"n1","namespace":"ns","name":"web","uid":"u1","containers":[{"name":"app","image":"app:1"}]}`); code != http.StatusCreated {
		t.Fatalf("POST: %d %s", code, body)
	}
	if code, body := do(s, http.MethodDelete, "/pods/ns/web?gracePeriodSeconds=10", ""); code != http.StatusOK {
		t.Fatalf("DELETE: %d %s", code, body)
	}
	if code, body := do(s, http.MethodDelete, "/pods/ns/web?gracePeriodSeconds=60", ""); code != http.StatusOK {
		t.Fatalf("second DELETE: %d %s", code, body)
	}
	if code, body := do(s, http.MethodDelete, "/pods/ns/web?gracePeriodSeconds=-1", ""); code != http.StatusBadRequest {
		t.Errorf("DELETE with a negative grace period: %d %s, want 400", code, body)
	}
	clk.Step(9 * time.Second)
	if _, ok := s.Pod("ns", "web"); !ok {
		t.Fatal("pod gone before its grace period of 10s")
	}
	if code, _ := do(s, http.MethodGet, "/pods/ns/web/containers/app/logs?tail=1", ""); code != http.StatusOK {
		t.Errorf("logs of a stopping pod: %d, want 200", code)
	}
	clk.Step(time.Second)
	if code, body := do(s, http.MethodGet, "/pods/ns/web", ""); code != http.StatusNotFound {
		t.Errorf("GET after the grace period: %d %s, want 404", code, body)
	}
	if code, body := do(s, http.MethodGet, "/pods?node=n1", ""); code != http.StatusOK || strings.TrimSpace(body) != "[]" {
		t.Errorf("list after the grace period: %d %s, want 200 []", code, body)
	}
	if d := s.Deletions(); len(d) != 2 || d[0].Grace != 10*time.Second || d[1].Grace != time.Minute {
		t.Errorf("deletions %+v, want 10s then 1m", d)
	}
}
