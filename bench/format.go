package main

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// table is a header and rows of cells, printed aligned or as Markdown.
type table struct {
	header []string
	rows   [][]string
	right  []bool // right-align the column in text output
}

// text renders the table with aligned columns.
func (t table) text() string {
	widths := make([]int, len(t.header))
	for _, row := range append([][]string{t.header}, t.rows...) {
		for i, cell := range row {
			widths[i] = max(widths[i], len([]rune(cell)))
		}
	}
	var b strings.Builder
	line := func(row []string) {
		for i, cell := range row {
			pad := strings.Repeat(" ", widths[i]-len([]rune(cell)))
			if i < len(t.right) && t.right[i] {
				cell = pad + cell
			} else if i < len(row)-1 {
				cell += pad
			}
			if i > 0 {
				b.WriteString("  ")
			}
			b.WriteString(cell)
		}
		b.WriteString("\n")
	}
	line(t.header)
	sep := make([]string, len(t.header))
	for i := range sep {
		sep[i] = strings.Repeat("-", widths[i])
	}
	line(sep)
	for _, row := range t.rows {
		line(row)
	}
	return b.String()
}

// markdown renders the table as a GitHub Markdown table.
func (t table) markdown() string {
	var b strings.Builder
	b.WriteString("| " + strings.Join(t.header, " | ") + " |\n|")
	for i := range t.header {
		if i < len(t.right) && t.right[i] {
			b.WriteString("---:|")
		} else {
			b.WriteString("---|")
		}
	}
	b.WriteString("\n")
	for _, row := range t.rows {
		b.WriteString("| " + strings.Join(row, " | ") + " |\n")
	}
	return b.String()
}

// dash stands for a number that does not apply.
const dash = "—"

// fmtCount prints n rounded, with thousands separators.
func fmtCount(f float64) string {
	n := int64(math.Round(f))
	s := fmt.Sprint(n)
	if n < 0 {
		return "-" + fmtCount(-f)
	}
	var b strings.Builder
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// fmtDur prints a latency in µs below a millisecond, else in ms.
func fmtDur(d time.Duration) string {
	if d < 0 {
		return "-" + fmtDur(-d)
	}
	us := float64(d) / float64(time.Microsecond)
	switch {
	case us < 1000:
		return fmt.Sprintf("%.0fµs", us)
	case us < 10000:
		return fmt.Sprintf("%.2fms", us/1000)
	default:
		return fmt.Sprintf("%.1fms", us/1000)
	}
}

// fmtRatio prints a ratio as 0.87×.
func fmtRatio(f float64) string {
	if f > 0 && f < 0.01 {
		return "<0.01×"
	}
	if f >= 100 {
		return fmt.Sprintf("%.0f×", f)
	}
	return fmt.Sprintf("%.2f×", f)
}

// fmtFloat prints f with one decimal, or two below 10.
func fmtFloat(f float64) string {
	if f < 10 {
		return fmt.Sprintf("%.2f", f)
	}
	return fmt.Sprintf("%.1f", f)
}
