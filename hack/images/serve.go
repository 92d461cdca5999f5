package main

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// privatePrefix is where the repositories that need basic auth live.
const privatePrefix = "/v2/private/"

type serveConfig struct {
	dir            string // empty: no images but those pushed (writable only)
	writable       bool   // accept pushes, kept in memory
	listen         string
	user, password string // basic auth of private/; empty: private/ is refused to all
	readyFile      string
}

func splitAuth(s string) (user, password string, err error) {
	user, password, ok := strings.Cut(s, ":")
	if !ok || user == "" || password == "" {
		return "", "", errors.New("--auth: want USER:PASSWORD")
	}
	return user, password, nil
}

// serve serves the images of cfg.dir until ctx ends. Every image is loaded
// before it listens, so once the ready file is there the registry has
// them all.
func serve(ctx context.Context, cfg serveConfig, logw io.Writer) error {
	logger := log.New(logw, "registry: ", log.LstdFlags)
	reg, n, err := loadRegistry(ctx, cfg.dir, cfg.writable, logger)
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	handler := privateAuth(reg, cfg.user, cfg.password, logger)
	if !cfg.writable {
		handler = readOnly(handler, logger)
	}
	ln, err := net.Listen("tcp", cfg.listen)
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	srv := &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 30 * time.Second,
		ErrorLog:          logger,
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	addr := ln.Addr().String()
	if cfg.readyFile != "" {
		if err := writeReady(cfg.readyFile, addr); err != nil {
			_ = srv.Close()
			return fmt.Errorf("serve: %w", err)
		}
		defer os.Remove(cfg.readyFile)
	}
	if cfg.writable {
		logger.Printf("serving %d images of %q on %s, accepting pushes (kept in memory)", n, cfg.dir, addr)
	} else {
		logger.Printf("serving %d images of %s on %s", n, cfg.dir, addr)
	}
	select {
	case err := <-served:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil {
		_ = srv.Close()
	}
	logger.Printf("stopped")
	return nil
}

// writeReady writes the address to file atomically, so a reader never sees
// half of it.
func writeReady(file, addr string) error {
	tmp := file + ".tmp"
	if err := os.WriteFile(tmp, []byte(addr+"\n"), 0o644); err != nil {
		return fmt.Errorf("write ready file: %w", err)
	}
	if err := os.Rename(tmp, file); err != nil {
		return fmt.Errorf("write ready file: %w", err)
	}
	return nil
}

// loadRegistry is a registry whose blobs are the layout's own files and
// whose manifests are every image of the layout, each under its
// repository path without the registry host (registry.k8s.io/pause:3.10.2
// as pause:3.10.2, docker.io/library/busybox:latest as library/busybox:latest).
// It returns how many references it holds. A writable registry also keeps
// what is pushed to it, in memory; its dir may be empty.
func loadRegistry(ctx context.Context, dir string, writable bool, logger *log.Logger) (http.Handler, int, error) {
	if dir == "" {
		if !writable {
			return nil, 0, errors.New("no image layout to serve")
		}
		return registry.New(registry.Logger(logger)), 0, nil
	}
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return nil, 0, fmt.Errorf("read image layout: %w", err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, 0, fmt.Errorf("read image layout: %w", err)
	}
	var blobs registry.BlobHandler = layoutBlobs{dir: filepath.Join(dir, "blobs")}
	if writable {
		blobs = pushedBlobs{layout: blobs.(layoutBlobs), pushed: registry.NewInMemoryBlobHandler()}
	}
	reg := registry.New(registry.WithBlobHandler(blobs), registry.Logger(logger))
	// The manifests go in through the registry's own API, in process.
	direct := remote.WithTransport(handlerTransport{reg})
	n := 0
	for _, desc := range im.Manifests {
		full := desc.Annotations[refAnnotation]
		if full == "" {
			continue
		}
		ref, err := name.NewTag(full, name.StrictValidation)
		if err != nil {
			return nil, 0, fmt.Errorf("image layout: %s: %w", full, err)
		}
		img, err := idx.Image(desc.Digest)
		if err != nil {
			return nil, 0, fmt.Errorf("image layout: %s: %w", full, err)
		}
		local, err := name.NewTag("localhost/"+ref.Context().RepositoryStr()+":"+ref.TagStr(), name.Insecure)
		if err != nil {
			return nil, 0, fmt.Errorf("image layout: %s: %w", full, err)
		}
		if err := remote.Put(local, img, direct, remote.WithContext(ctx)); err != nil {
			return nil, 0, fmt.Errorf("load %s: %w", full, err)
		}
		n++
	}
	if n == 0 && !writable {
		return nil, 0, fmt.Errorf("no images in %s (run images build)", dir)
	}
	return reg, n, nil
}

// layoutBlobs serves blobs from the layout's blobs directory
// (blobs/<algorithm>/<hex>). It is read-only.
type layoutBlobs struct{ dir string }

func (b layoutBlobs) path(h v1.Hash) string { return filepath.Join(b.dir, h.Algorithm, h.Hex) }

func (b layoutBlobs) Get(_ context.Context, _ string, h v1.Hash) (io.ReadCloser, error) {
	f, err := os.Open(b.path(h))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, registry.ErrNotFound
	}
	return f, err
}

func (b layoutBlobs) Stat(_ context.Context, _ string, h v1.Hash) (int64, error) {
	info, err := os.Stat(b.path(h))
	if errors.Is(err, fs.ErrNotExist) {
		return 0, registry.ErrNotFound
	}
	if err != nil {
		return 0, err
	}
	return info.Size(), nil
}

// pushedBlobs are the layout's blobs, read-only, and those pushed since the
// registry started, in memory.
type pushedBlobs struct {
	layout layoutBlobs
	pushed registry.BlobHandler // also a stat and put handler
}

func (b pushedBlobs) Get(ctx context.Context, repo string, h v1.Hash) (io.ReadCloser, error) {
	rc, err := b.layout.Get(ctx, repo, h)
	if errors.Is(err, registry.ErrNotFound) {
		return b.pushed.Get(ctx, repo, h)
	}
	return rc, err
}

func (b pushedBlobs) Stat(ctx context.Context, repo string, h v1.Hash) (int64, error) {
	n, err := b.layout.Stat(ctx, repo, h)
	if errors.Is(err, registry.ErrNotFound) {
		return b.pushed.(registry.BlobStatHandler).Stat(ctx, repo, h)
	}
	return n, err
}

func (b pushedBlobs) Put(ctx context.Context, repo string, h v1.Hash, rc io.ReadCloser) error {
	return b.pushed.(registry.BlobPutHandler).Put(ctx, repo, h, rc)
}

// handlerTransport sends a request straight to a handler, without a network.
type handlerTransport struct{ h http.Handler }

func (t handlerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	rec := httptest.NewRecorder()
	t.h.ServeHTTP(rec, req)
	resp := rec.Result()
	resp.Request = req
	return resp, nil
}

// privateAuth asks for basic auth on the repositories under private/ and
// lets everything else through anonymously.
func privateAuth(next http.Handler, user, password string, logger *log.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, privatePrefix) {
			u, p, ok := r.BasicAuth()
			good := ok && user != "" &&
				subtle.ConstantTimeCompare([]byte(u), []byte(user)) == 1 &&
				subtle.ConstantTimeCompare([]byte(p), []byte(password)) == 1
			if !good {
				logger.Printf("%s %s 401 (credentials given: %t)", r.Method, r.URL, ok)
				w.Header().Set("WWW-Authenticate", `Basic realm="nodelet images"`)
				writeError(w, http.StatusUnauthorized, "UNAUTHORIZED", "authentication required")
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// readOnly refuses every request that would change the registry: what it
// serves is what build wrote.
func readOnly(next http.Handler, logger *log.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			logger.Printf("%s %s 405 (read-only)", r.Method, r.URL)
			writeError(w, http.StatusMethodNotAllowed, "UNSUPPORTED", "this registry is read-only")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// writeError writes an error in the distribution spec's form.
func writeError(w http.ResponseWriter, status int, code, message string) {
	type regError struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}
	body, _ := json.Marshal(struct {
		Errors []regError `json:"errors"`
	}{[]regError{{code, message}}})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Docker-Distribution-API-Version", "registry/2.0")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}
