package config

import (
	"strings"
	"testing"
	"time"
)

func TestStaticPodConfig(t *testing.T) {
	c := Default()
	if c.FileCheckFrequency.Duration != 20*time.Second || c.HTTPCheckFrequency.Duration != 20*time.Second {
		t.Errorf("check frequency defaults = %s, %s; want 20s, 20s", c.FileCheckFrequency.Duration, c.HTTPCheckFrequency.Duration)
	}
	tests := []struct {
		name    string
		mutate  func(*Config)
		wantErr string // a field path the errors name; empty: valid
	}{
		{"a directory with process", func(c *Config) { c.Provider, c.StaticPodPath = ProviderProcess, "/etc/nodelet/manifests" }, ""},
		{"a URL with cri", func(c *Config) { c.Provider, c.StaticPodURL = ProviderCRI, "https://example.com/pods.yaml" }, ""},
		{"with sim", func(c *Config) { c.StaticPodPath = "/etc/nodelet/manifests" }, "provider"},
		{"relative directory", func(c *Config) { c.Provider, c.StaticPodPath = ProviderProcess, "manifests" }, "staticPodPath"},
		{"not an http URL", func(c *Config) { c.Provider, c.StaticPodURL = ProviderProcess, "file:///etc/pods" }, "staticPodURL"},
		{"zero frequency", func(c *Config) { c.FileCheckFrequency.Duration = -time.Second }, "fileCheckFrequency"},
		{"zero http frequency", func(c *Config) { c.HTTPCheckFrequency.Duration = -time.Second }, "httpCheckFrequency"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Default()
			c.NodeName = "n"
			tt.mutate(c)
			errs := c.Validate()
			switch {
			case tt.wantErr == "" && len(errs) > 0:
				t.Errorf("valid config refused: %v", errs)
			case tt.wantErr != "" && (len(errs) == 0 || !strings.Contains(errs.ToAggregate().Error(), tt.wantErr)):
				t.Errorf("errors %v, want one naming %s", errs, tt.wantErr)
			}
		})
	}
}
