package promscrape

import (
	"bytes"
	"context"
	"fmt"

	"github.com/group-metrics-server/group-metrics-server/pkg/sources"
)

// lineLimits are the caps filterLines holds a target's kept lines to.
type lineLimits struct {
	labels, labelBytes, series int
}

func (l *Limits) lines() lineLimits {
	return lineLimits{labels: l.LabelsPerSeries, labelBytes: l.LabelBytesPerSeries, series: l.SeriesPerTarget}
}

// checkSeriesLine holds one kept line, if it is a sample line, to lim, and
// counts it in series.
func checkSeriesLine(line []byte, lim lineLimits, series *int) error {
	s := bytes.TrimLeft(line, " \t")
	if s[0] == '#' {
		return nil
	}
	if *series++; *series > lim.series {
		return fmt.Errorf("more than %d series of allow-listed families (limits.seriesPerTarget)", lim.series)
	}
	labels, labelBytes := countLabels(s)
	if labels > lim.labels {
		return fmt.Errorf("a series line carries more than %d labels (limits.labelsPerSeries)", lim.labels)
	}
	if labelBytes > lim.labelBytes {
		return fmt.Errorf("a series line's labels take more than %d bytes (limits.labelBytesPerSeries)", lim.labelBytes)
	}
	return nil
}

// countLabels counts the labels of a sample line without parsing it: the
// '=' signs outside quoted strings between the first '{' and its closing
// '}' (a quoted metric name, as in {"name",a="b"}, has none). labelBytes is
// the length of what the braces hold. A malformed line may be counted short;
// the parser rejects it.
func countLabels(s []byte) (labels, labelBytes int) {
	open, inQuote, escaped := -1, false, false
	for i, c := range s {
		switch {
		case inQuote:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inQuote = false
			}
		case c == '"':
			inQuote = true
		case open < 0:
			// Blanks may stand between a name and its braces; a brace
			// after the value is a malformed line, counted all the same.
			if c == '{' {
				open = i
			}
		case c == '=':
			labels++
		case c == '}':
			return labels, i - open - 1
		}
	}
	if open < 0 {
		return 0, 0
	}
	return labels, len(s) - open - 1
}

func errDecodeStopped(ctx context.Context) error {
	return sources.WithReason(sources.ReasonTimeout, fmt.Errorf("decode stopped: %w", context.Cause(ctx)))
}
