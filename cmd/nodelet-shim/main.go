// Command nodelet-shim runs the process provider's sandboxes and container
// supervisors (pkg/providers/process/sandbox). The nodelet binary can do the
// same, but this one starts in a fraction of the time: it carries none of
// the agent's client libraries, and a pod starts it several times.
package main

import (
	"fmt"
	"os"

	"github.com/nodelet/nodelet/pkg/providers/process/sandbox"
)

func main() {
	if len(os.Args) < 2 || !sandbox.IsSubcommand(os.Args[1]) {
		fmt.Fprintln(os.Stderr, "nodelet-shim: started by nodelet's process provider, not by hand")
		os.Exit(2)
	}
	os.Exit(sandbox.Main(os.Args[1:]))
}
