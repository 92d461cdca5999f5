package probe

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
)

// grpcProbe calls grpc.health.v1.Health/Check for the probe's service over a
// plaintext connection; only SERVING is Success.
func grpcProbe(ctx context.Context, a *corev1.GRPCAction, timeout time.Duration, t Target) (Result, string) {
	addr, err := address("", int(a.Port), t)
	if err == nil && (a.Port <= 0 || a.Port > 65535) {
		err = fmt.Errorf("invalid port number %d", a.Port)
	}
	if err != nil {
		return Unknown, fmt.Sprintf("grpc probe: %v", err)
	}
	service := ""
	if a.Service != nil {
		service = *a.Service
	}
	conn, err := grpc.NewClient("passthrough:///"+addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUserAgent(userAgent("kube-probe")),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return dialContext(ctx, "tcp", addr)
		}),
	)
	if err != nil {
		return Failure, fmt.Sprintf("grpc probe: connect to %s: %v", addr, err)
	}
	defer func() { _ = conn.Close() }()

	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: service})
	if err != nil {
		st, _ := status.FromError(err)
		switch {
		case st.Code() == codes.Unimplemented:
			return Failure, fmt.Sprintf("this server does not implement the grpc health protocol (grpc.health.v1.Health): %s", st.Message())
		case st.Code() == codes.DeadlineExceeded || errors.Is(ctx.Err(), context.DeadlineExceeded):
			return Failure, fmt.Sprintf("timeout: health rpc did not complete within %v", timeout)
		default:
			return Failure, fmt.Sprintf("health rpc probe failed: %v", err)
		}
	}
	if s := resp.GetStatus(); s != healthpb.HealthCheckResponse_SERVING {
		return Failure, fmt.Sprintf("service unhealthy (responded with %q)", s.String())
	}
	return Success, "service healthy"
}
