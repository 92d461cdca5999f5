package config

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/pkg/config/checkpoint"
)

// ConditionConfigOK is the node condition that says which configuration the
// agent runs and why.
const ConditionConfigOK corev1.NodeConditionType = "ConfigOK"

// The ConfigOK condition's messages and reasons. They are the Dynamic
// Kubelet Config's, so that people and tools that knew those read these
// the same way: the message says which config is in use, the reason why.
const (
	// Messages: the config in use.
	msgCurrentLocal    = "using current: local"
	msgLKGLocal        = "using last-known-good: local"
	msgCurrentRemote   = "using current: %s"
	msgLKGRemote       = "using last-known-good: %s"
	msgLocalNotDynamic = "using local config"

	// Reasons: why that config.
	reasonCurrentLocalOK  = "when the config source is nil, nodelet uses its local config"
	reasonCurrentRemoteOK = "passing all checks"
	reasonFailLoad        = "failed to load current: %s"
	reasonFailParse       = "failed to parse current: %s"
	reasonFailValidate    = "failed to validate current: %s"
	reasonFailCrashLoop   = "current failed trial period due to crash loop: %s"
	reasonLKGFailLoad     = "failed to load last-known-good: %s"
	reasonLKGFailParse    = "failed to parse last-known-good: %s"
	reasonLKGFailValidate = "failed to validate last-known-good: %s"
	reasonFailSync        = "failed to sync, desc: %s"
	reasonNotDynamic      = "remote config is disabled: %s"

	// Descriptions of a failed sync.
	descInvalidAnnotation = "invalid annotation %s=%q: want <namespace>/<configmap>"
	descDownload          = "failed to download: %s"
	descSaveCheckpoint    = "failed to save config checkpoint for %s"
	descSetAssigned       = "failed to set assigned config to %s"
	descResetLocal        = "failed to reset to local config"

	// maxDetail bounds the error detail carried in a condition message.
	maxDetail = 2048
)

// configOK is the content of the ConfigOK condition, without times.
type configOK struct {
	status  corev1.ConditionStatus
	reason  string
	message string
}

// withDetail appends err's text to a message, bounded.
func withDetail(message string, err error) string {
	if err == nil {
		return message
	}
	detail := strings.Join(strings.Fields(err.Error()), " ")
	if len(detail) > maxDetail {
		detail = detail[:maxDetail] + "…"
	}
	return message + "; error: " + detail
}

// sourceName is how a config source appears in ConfigOK: "local" or the
// ConfigMap with its uid and resourceVersion.
func sourceName(src *checkpoint.Source) string {
	if src == nil {
		return "local"
	}
	return src.String()
}

func usingMessage(src *checkpoint.Source, lastKnownGood bool) string {
	switch {
	case src == nil && lastKnownGood:
		return msgLKGLocal
	case src == nil:
		return msgCurrentLocal
	case lastKnownGood:
		return fmt.Sprintf(msgLKGRemote, src)
	default:
		return fmt.Sprintf(msgCurrentRemote, src)
	}
}
