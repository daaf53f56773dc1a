package replay

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// WriteText writes the report for people: one line per recorded answer
// (the recorded packet, the live one, what differs), then a summary.
func (r *Report) WriteText(w io.Writer) {
	fmt.Fprintf(w, "conversation %s\nplayed %s, pace %s\n", r.Conversation, r.Played, r.Pace)
	for _, a := range r.Answers {
		switch {
		case a.Missing:
			fmt.Fprintf(w, "frame %5d  %-44s  live: none (timed out)\n", a.Frame, a.Recorded)
		case len(a.Diffs) == 0:
			fmt.Fprintf(w, "frame %5d  %-44s  live: same%s\n", a.Frame, a.Recorded, delay(a))
		default:
			var d []string
			for _, x := range a.Diffs {
				t := ""
				if x.Tolerated {
					t = " (tolerated)"
				}
				d = append(d, fmt.Sprintf("%s %s -> %s%s", x.Field, x.Recorded, x.Live, t))
			}
			fmt.Fprintf(w, "frame %5d  %-44s  live: %s  DIFFERS: %s%s\n", a.Frame, a.Recorded, a.Live, strings.Join(d, "; "), delay(a))
		}
	}
	for _, u := range r.Unexpected {
		fmt.Fprintf(w, "unexpected   %s\n", u)
	}
	fmt.Fprintf(w, "sent %d", r.Sent)
	for _, x := range []struct {
		n    int
		what string
	}{{r.Dropped, "dropped"}, {r.Duplicated, "duplicated"}, {r.DupAnswers, "answers to a duplicate (not counted)"}, {r.Corrupted, "corrupted"}, {r.BadICRC, "answers with a bad ICRC"}, {r.CNPs, "CNPs (not answers)"}, {r.Resent, "requests the peer sent again (not answers)"}} {
		if x.n > 0 {
			fmt.Fprintf(w, ", %d %s", x.n, x.what)
		}
	}
	fmt.Fprintf(w, "; %d answers recorded, %d unexpected\n", len(r.Answers), len(r.Unexpected))
	if r.Agree {
		fmt.Fprintln(w, "the live peer agrees with the recording")
		return
	}
	var d []string
	for _, f := range r.SortedDifferences() {
		d = append(d, f+" "+strconv.Itoa(r.Differences[f]))
	}
	if len(r.Unexpected) > 0 {
		d = append(d, "unexpected "+strconv.Itoa(len(r.Unexpected)))
	}
	fmt.Fprintf(w, "the live peer differs: %s\n", strings.Join(d, ", "))
}

func delay(a Answer) string {
	if a.DelayUS == 0 {
		return ""
	}
	return fmt.Sprintf("  (%v, recorded %v)", us(a.DelayUS), us(a.RecordedDelay))
}

func us(v float64) time.Duration { return time.Duration(v * 1e3).Round(time.Microsecond) }
