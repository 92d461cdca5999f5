package probe

import (
	"context"
	"fmt"
	"net"

	corev1 "k8s.io/api/core/v1"
)

// tcpProbe succeeds when a TCP connection to the port can be opened.
func tcpProbe(ctx context.Context, a *corev1.TCPSocketAction, t Target) (Result, string) {
	port, err := resolvePort(a.Port, t.Container)
	if err != nil {
		return Unknown, fmt.Sprintf("tcp probe: %v", err)
	}
	addr, err := address(a.Host, port, t)
	if err != nil {
		return Unknown, fmt.Sprintf("tcp probe: %v", err)
	}
	conn, err := dialContext(ctx, "tcp", addr)
	if err != nil {
		return Failure, err.Error()
	}
	_ = conn.Close()
	return Success, ""
}

// dialer opens every probe connection; the deadline comes from the context.
var dialer net.Dialer

func dialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	return dialer.DialContext(ctx, network, addr)
}
