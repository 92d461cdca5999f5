package config

import (
	"strings"
	"testing"
)

func TestHealthz(t *testing.T) {
	c := Default()
	c.NodeName = "n"
	if c.HealthzPort != 0 || c.HealthzBindAddress != "127.0.0.1" {
		t.Errorf("healthz defaults = %s:%d, want 127.0.0.1:0 (off)", c.HealthzBindAddress, c.HealthzPort)
	}
	for _, tc := range []struct {
		name    string
		port    int32
		address string
		want    string // a part of the error; empty: valid
	}{
		{name: "off", port: 0, address: "127.0.0.1"},
		{name: "every interface", port: 10248, address: "0.0.0.0"},
		{name: "IPv6", port: 10248, address: "::1"},
		{name: "negative port", port: -1, address: "127.0.0.1", want: "healthzPort"},
		{name: "port too large", port: 65536, address: "127.0.0.1", want: "healthzPort"},
		{name: "not an IP", port: 10248, address: "localhost", want: "healthzBindAddress"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := *c
			c.HealthzPort, c.HealthzBindAddress = tc.port, tc.address
			errs := c.Validate()
			switch {
			case tc.want == "" && len(errs) > 0:
				t.Errorf("Validate() = %v, want no error", errs)
			case tc.want != "" && !strings.Contains(errs.ToAggregate().Error(), tc.want):
				t.Errorf("Validate() = %v, want an error naming %s", errs, tc.want)
			}
		})
	}
}

func TestLoadHealthz(t *testing.T) {
	c, err := Decode([]byte("apiVersion: nodelet.io/v1alpha1\nkind: NodeletConfiguration\nnodeName: sim\nhealthzPort: 10248\nhealthzBindAddress: 0.0.0.0\n"), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if c.HealthzPort != 10248 || c.HealthzBindAddress != "0.0.0.0" {
		t.Errorf("loaded healthz = %s:%d, want 0.0.0.0:10248", c.HealthzBindAddress, c.HealthzPort)
	}
}
