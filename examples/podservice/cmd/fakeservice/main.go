// Command fakeservice serves the in-memory pod service of package
// fakeservice, for trying podservice-node by hand:
//
//	fakeservice --listen 127.0.0.1:8080 &
//	podservice-node --kubeconfig admin.kubeconfig --service-url http://127.0.0.1:8080
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/nodelet/nodelet/examples/podservice/fakeservice"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:8080", "address to serve the pod service's API on")
	startDelay := flag.Duration("start-delay", 2*time.Second, "how long a new pod stays Pending")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	srv := &http.Server{Addr: *listen, Handler: fakeservice.New(fakeservice.Options{StartDelay: *startDelay}),
		ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Shutdown(context.Background())
	}()
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		fmt.Fprintln(os.Stderr, "fakeservice:", err)
		os.Exit(1)
	}
}
