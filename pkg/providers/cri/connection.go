package cri

import (
	"context"
	"fmt"
	"sync"
	"time"

	internalapi "k8s.io/cri-api/pkg/apis"
	remote "k8s.io/cri-client/pkg"
	"k8s.io/utils/clock"
)

// connection is the agent's link to the runtime's services at one
// endpoint. It is made on first use and made again after a failure, at
// most once per redialEvery, so an endpoint with nothing behind it yet is
// an error of each call (and of Ping), never of the agent's start.
type connection struct {
	endpoint string
	timeout  time.Duration
	clock    clock.Clock

	mu       sync.Mutex
	runtime  internalapi.RuntimeService
	images   internalapi.ImageManagerService
	lastErr  error
	lastDial time.Time
}

// redialEvery bounds how often an unreachable runtime is dialled again.
const redialEvery = time.Second

func newConnection(endpoint string, timeout time.Duration, clk clock.Clock) *connection {
	return &connection{endpoint: endpoint, timeout: timeout, clock: clk}
}

// services returns the runtime and image services, dialling them if
// needed. The error names the endpoint.
func (c *connection) services(ctx context.Context) (internalapi.RuntimeService, internalapi.ImageManagerService, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.runtime != nil {
		return c.runtime, c.images, nil
	}
	if c.lastErr != nil && c.clock.Since(c.lastDial) < redialEvery {
		return nil, nil, c.lastErr
	}
	c.lastDial = c.clock.Now()
	rs, err := remote.NewRemoteRuntimeService(ctx, c.endpoint, c.timeout, nil, false)
	if err != nil {
		c.lastErr = fmt.Errorf("container runtime at %s is not reachable: %w", c.endpoint, err)
		return nil, nil, c.lastErr
	}
	is, err := remote.NewRemoteImageService(ctx, c.endpoint, c.timeout, nil, false)
	if err != nil {
		_ = rs.Close(ctx)
		c.lastErr = fmt.Errorf("image service at %s is not reachable: %w", c.endpoint, err)
		return nil, nil, c.lastErr
	}
	c.runtime, c.images, c.lastErr = rs, is, nil
	return rs, is, nil
}

// close drops the connection.
func (c *connection) close(ctx context.Context) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.runtime != nil {
		_ = c.runtime.Close(ctx)
		_ = c.images.Close(ctx)
		c.runtime, c.images = nil, nil
	}
}
