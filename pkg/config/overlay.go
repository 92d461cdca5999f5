package config

import (
	"encoding/json"
	"fmt"
	"reflect"

	"k8s.io/apimachinery/pkg/util/validation/field"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// Local is the agent's local configuration, and what it takes to build the
// configuration of a remote config from it.
type Local struct {
	// Config is the local configuration in effect: defaults, then the file,
	// then the flags. It must be valid.
	Config *Config
	// File is the config file as decoded, neither defaulted nor
	// flag-applied; nil when there is none.
	File *Config
	// Flags applies the command line over a config; nil when there are no
	// flags to apply.
	Flags func(*Config) error
}

// identityFields are set by the local config only: they say which nodes
// this agent runs, how, and where it keeps its state (the checkpoints of
// remote configs among it). A remote config that changed them would make
// the agent read its annotation from another node, or lose its checkpoints.
var identityFields = []struct {
	path string
	get  func(*Config) any
	set  func(dst, src *Config)
}{
	{"nodeName", func(c *Config) any { return c.NodeName }, func(d, s *Config) { d.NodeName = s.NodeName }},
	{"nodes", func(c *Config) any { return c.Nodes }, func(d, s *Config) { d.Nodes = s.Nodes }},
	{"shard", func(c *Config) any { return c.Shard }, func(d, s *Config) { d.Shard = s.Shard }},
	{"shardGroup", func(c *Config) any { return c.ShardGroup }, func(d, s *Config) { d.ShardGroup = s.ShardGroup }},
	{"manageSingleNode", func(c *Config) any { return c.ManageSingleNode }, func(d, s *Config) { d.ManageSingleNode = s.ManageSingleNode }},
	{"manageAllNodes", func(c *Config) any { return c.ManageAllNodes }, func(d, s *Config) { d.ManageAllNodes = s.ManageAllNodes }},
	{"manageNodesWithAnnotationSelector", func(c *Config) any { return c.ManageNodesWithAnnotationSelector }, func(d, s *Config) {
		d.ManageNodesWithAnnotationSelector = s.ManageNodesWithAnnotationSelector
	}},
	{"manageNodesWithLabelSelector", func(c *Config) any { return c.ManageNodesWithLabelSelector }, func(d, s *Config) {
		d.ManageNodesWithLabelSelector = s.ManageNodesWithLabelSelector
	}},
	{"provider", func(c *Config) any { return c.Provider }, func(d, s *Config) { d.Provider = s.Provider }},
	{"rootDir", func(c *Config) any { return c.RootDir }, func(d, s *Config) { d.RootDir = s.RootDir }},
}

// errParse and errValidate tell which step of building a remote config
// failed; they wrap the step's error.
type errParse struct{ err error }

func (e errParse) Error() string { return e.err.Error() }
func (e errParse) Unwrap() error { return e.err }

type errValidate struct{ err error }

func (e errValidate) Error() string { return e.err.Error() }
func (e errValidate) Unwrap() error { return e.err }

// Compose builds the configuration of a remote config: data (a ConfigMap's
// config, decoded strictly) is applied over the local config file as a JSON
// merge patch (RFC 7386: what it sets wins, what it leaves out keeps the
// file's value, null removes it), then come the defaults, then the flags,
// which win over both. The result is validated; a remote config may not
// change the fields that identify the agent (nodeName, nodes, shard,
// provider, rootDir). A decoding error is an errParse, a validation error an
// errValidate; both name source.
func (l *Local) Compose(data []byte, source string) (*Config, error) {
	remote, err := Decode(data, source)
	if err != nil {
		return nil, errParse{err}
	}
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, errParse{fmt.Errorf("%s: %w", source, err)}
	}
	var patch any
	if err := kjson.UnmarshalCaseSensitivePreserveInts(js, &patch); err != nil {
		return nil, errParse{fmt.Errorf("%s: %w", source, err)}
	}
	var base any = map[string]any{}
	if l.File != nil {
		fileJSON, err := json.Marshal(l.File)
		if err != nil {
			return nil, fmt.Errorf("marshal local config: %w", err)
		}
		if err := kjson.UnmarshalCaseSensitivePreserveInts(fileJSON, &base); err != nil {
			return nil, fmt.Errorf("decode local config: %w", err)
		}
	}
	merged, err := json.Marshal(mergePatch(base, patch))
	if err != nil {
		return nil, fmt.Errorf("merge %s over the local config: %w", source, err)
	}
	cfg, err := Decode(merged, source+" over the local config file")
	if err != nil {
		return nil, errParse{err}
	}
	SetDefaults(cfg)
	if l.Flags != nil {
		if err := l.Flags(cfg); err != nil {
			return nil, fmt.Errorf("apply flags over %s: %w", source, err)
		}
	}
	// The identity is the local config's, whatever the file and flags
	// said; the remote config may only repeat it.
	var errs field.ErrorList
	for _, f := range identityFields {
		if v := f.get(remote); !reflect.ValueOf(v).IsZero() && v != f.get(l.Config) {
			errs = append(errs, field.Forbidden(field.NewPath(f.path),
				fmt.Sprintf("is %v in the local config, which alone sets it; a remote config cannot change it", f.get(l.Config))))
		}
		f.set(cfg, l.Config)
	}
	errs = append(errs, cfg.Validate()...)
	if err := ValidationError(source, errs); err != nil {
		return nil, errValidate{err}
	}
	return cfg, nil
}

// mergePatch applies patch over base as RFC 7386 says: objects merge key by
// key, null removes a key, anything else replaces.
func mergePatch(base, patch any) any {
	p, ok := patch.(map[string]any)
	if !ok {
		return patch
	}
	b, ok := base.(map[string]any)
	if !ok {
		b = map[string]any{}
	}
	for k, v := range p {
		if v == nil {
			delete(b, k)
			continue
		}
		b[k] = mergePatch(b[k], v)
	}
	return b
}
