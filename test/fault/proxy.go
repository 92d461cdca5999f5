package fault

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"path/filepath"
	"sync"
	"time"

	"k8s.io/client-go/tools/clientcmd"
)

// Proxy is a TCP proxy to one upstream address (the API server) whose
// connections a test can disturb:
//
//   - Pause holds every byte in both directions, connections stay open;
//     Resume delivers what was held.
//   - Cut is a partition: nothing passes, new connections are accepted and
//     hang; Heal closes every connection that lived through it (as their
//     peers' timeouts would have) and lets new ones through.
//   - Reset closes every connection with a TCP reset and resets each new
//     one until Heal.
//   - Slow delays every byte sent upstream by d: each request answers d
//     later, as over a long, slow link; Slow(0) ends it.
type Proxy struct {
	upstream string
	ln       net.Listener

	mu    sync.Mutex
	state state
	gate  chan struct{} // closed while bytes may pass
	delay time.Duration
	links map[*link]bool
}

type state int

const (
	passing state = iota
	paused
	cut
	resetting
)

// link is one proxied connection.
type link struct {
	client, server net.Conn
	held           bool // lived through a Cut
	closeOnce      sync.Once
}

func (l *link) close(reset bool) {
	l.closeOnce.Do(func() {
		for _, c := range []net.Conn{l.client, l.server} {
			if c == nil {
				continue
			}
			if tc, ok := c.(*net.TCPConn); ok && reset {
				_ = tc.SetLinger(0)
			}
			_ = c.Close()
		}
	})
}

// NewProxy listens on a free loopback port and forwards to upstream
// (host:port).
func NewProxy(upstream string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	gate := make(chan struct{})
	close(gate)
	p := &Proxy{upstream: upstream, ln: ln, gate: gate, links: map[*link]bool{}}
	go p.accept()
	return p, nil
}

// Addr is where the proxy listens.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// ProxyKubeconfig writes a copy of the kubeconfig from whose API server
// goes through a new proxy, into dir, and returns the proxy and the copy's
// path. The API server's certificate must name 127.0.0.1, as the local
// control plane's does.
func ProxyKubeconfig(from, dir string) (*Proxy, string, error) {
	cfg, err := clientcmd.LoadFromFile(from)
	if err != nil {
		return nil, "", err
	}
	upstream := ""
	for _, c := range cfg.Clusters {
		u, err := url.Parse(c.Server)
		if err != nil {
			return nil, "", fmt.Errorf("%s: server %q: %w", from, c.Server, err)
		}
		if upstream != "" && u.Host != upstream {
			return nil, "", fmt.Errorf("%s: more than one API server", from)
		}
		upstream = u.Host
	}
	if upstream == "" {
		return nil, "", fmt.Errorf("%s: no cluster", from)
	}
	p, err := NewProxy(upstream)
	if err != nil {
		return nil, "", err
	}
	for _, c := range cfg.Clusters {
		c.Server = "https://" + p.Addr()
	}
	path := filepath.Join(dir, "proxied.kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		p.Close()
		return nil, "", err
	}
	return p, path, nil
}

func (p *Proxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.serve(c)
	}
}

func (p *Proxy) serve(client net.Conn) {
	l := &link{client: client}
	p.mu.Lock()
	st := p.state
	if st == cut {
		l.held = true
	}
	p.links[l] = true
	p.mu.Unlock()
	defer func() {
		l.close(false)
		p.mu.Lock()
		delete(p.links, l)
		p.mu.Unlock()
	}()
	if st == resetting {
		l.close(true)
		return
	}
	if st == cut {
		// Accepted, then nothing: wait for the cut to end this link.
		_, _ = io.Copy(io.Discard, client)
		return
	}
	server, err := net.DialTimeout("tcp", p.upstream, 10*time.Second)
	if err != nil {
		return
	}
	p.mu.Lock()
	l.server = server
	p.mu.Unlock()
	done := make(chan struct{}, 2)
	go func() { p.pump(server, client, true); done <- struct{}{} }()
	go func() { p.pump(client, server, false); done <- struct{}{} }()
	<-done
}

// chunk is bytes read at a time, to be written once their delay is over.
type chunk struct {
	data []byte
	at   time.Time
}

// pump copies from src to dst through the proxy's gate, delaying bytes
// sent upstream by the proxy's delay. It returns when either side fails.
func (p *Proxy) pump(dst, src net.Conn, upstream bool) {
	queue := make(chan chunk, 256)
	failed := make(chan struct{})
	go func() {
		defer close(queue)
		for {
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if n > 0 {
				select {
				case queue <- chunk{data: buf[:n], at: time.Now()}:
				case <-failed:
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	defer close(failed)
	for c := range queue {
		for {
			p.mu.Lock()
			gate, delay := p.gate, p.delay
			p.mu.Unlock()
			<-gate
			if upstream && delay > 0 {
				if wait := time.Until(c.at.Add(delay)); wait > 0 {
					time.Sleep(wait)
					continue // the proxy may have been paused meanwhile
				}
			}
			break
		}
		if _, err := dst.Write(c.data); err != nil {
			return
		}
	}
}

func (p *Proxy) hold(st state) {
	if p.state == passing {
		p.gate = make(chan struct{})
	}
	p.state = st
}

func (p *Proxy) release() {
	if p.state != passing {
		close(p.gate)
	}
	p.state = passing
}

// Pause holds every byte until Resume.
func (p *Proxy) Pause() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.hold(paused)
}

// Resume delivers what Pause held and lets bytes pass again.
func (p *Proxy) Resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.release()
}

// Cut partitions the agent from the API server until Heal.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.hold(cut)
	for l := range p.links {
		l.held = true
	}
}

// Reset closes every connection with a TCP reset, and resets new ones
// until Heal.
func (p *Proxy) Reset() {
	p.mu.Lock()
	p.hold(resetting)
	links := make([]*link, 0, len(p.links))
	for l := range p.links {
		links = append(links, l)
	}
	p.mu.Unlock()
	for _, l := range links {
		l.close(true)
	}
}

// Heal ends a Cut, Reset or Pause: connections that lived through a cut
// are closed, and bytes pass again.
func (p *Proxy) Heal() {
	p.mu.Lock()
	var held []*link
	for l := range p.links {
		if l.held {
			held = append(held, l)
		}
	}
	p.mu.Unlock()
	for _, l := range held {
		l.close(false)
	}
	p.mu.Lock()
	p.release()
	p.mu.Unlock()
}

// Slow delays every byte sent upstream by d from now on (0: no delay).
func (p *Proxy) Slow(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.delay = d
}

// Close stops the proxy and closes every connection through it.
func (p *Proxy) Close() error {
	err := p.ln.Close()
	p.mu.Lock()
	links := make([]*link, 0, len(p.links))
	for l := range p.links {
		links = append(links, l)
	}
	p.release()
	p.mu.Unlock()
	for _, l := range links {
		l.close(false)
	}
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}
