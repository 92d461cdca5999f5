package provider

import (
	"context"
	"errors"
	"io"
	"net"
)

// Forward copies between stream and conn, a connection a PortForward
// dialed, both ways, until the far end closes conn or ctx ends; it closes
// conn. When the client is done sending, conn's write side is closed and
// the reply may still come.
func Forward(ctx context.Context, conn net.Conn, stream io.ReadWriteCloser) error {
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	go func() {
		_, _ = io.Copy(conn, stream)
		if tc, ok := conn.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
	}()
	if _, err := io.Copy(stream, conn); err != nil && !errors.Is(err, net.ErrClosed) {
		return err
	}
	return ctx.Err()
}
