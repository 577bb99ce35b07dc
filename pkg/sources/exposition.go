package sources

// MetricNameLen is the length of the metric name s begins with, 0 for none,
// as the Prometheus text parser reads one under model.LegacyValidation
// (github.com/prometheus/common expfmt): a letter, '_' or ':', then digits
// too. The sources that read the text format bound or read lines with it.
func MetricNameLen[T ~string | ~[]byte](s T) int { return nameLen(s, true) }

// LabelNameLen is MetricNameLen for a label name, which has no ':'.
func LabelNameLen[T ~string | ~[]byte](s T) int { return nameLen(s, false) }

func nameLen[T ~string | ~[]byte](s T, colon bool) int {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c == '_':
		case c == ':' && colon:
		case c >= '0' && c <= '9' && i > 0:
		default:
			return i
		}
	}
	return len(s)
}
