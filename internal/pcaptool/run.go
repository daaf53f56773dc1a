package pcaptool

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
)

// Exit codes of the pcap commands.
const (
	ExitOK    = 0 // no error found
	ExitFound = 1 // an ICRC or format error (or a damaged file) was found
	ExitUsage = 2 // bad arguments, or a file could not be opened
)

// readFile calls fn for every frame of the capture at path. It returns
// an error for a file that cannot be opened (wrapping an *os.PathError)
// or that is damaged; frames read before the damage are delivered.
func readFile(path string, fn func(n int, f *Frame)) error {
	fh, err := os.Open(path)
	if err != nil {
		return err
	}
	defer fh.Close()
	return readFrames(fh, fn)
}

func readFrames(rd io.Reader, fn func(n int, f *Frame)) error {
	r, err := NewReader(rd)
	if err != nil {
		return err
	}
	var linkErr error
	var f Frame
	for n := 1; ; n++ {
		var err error
		f, err = r.Next()
		switch {
		case err == io.EOF:
			return linkErr
		case errors.Is(err, ErrLinkType):
			linkErr = err // reported once, after the frames
		case err != nil:
			return fmt.Errorf("after frame %d: %w", n-1, err)
		}
		fn(n, &f)
	}
}

// RunDecode writes one line (or one JSON object) per RoCE packet and
// per MAC Control frame (PAUSE, PFC) of the files to w, and problems
// with the files to errw. It returns the exit code.
func RunDecode(w, errw io.Writer, paths []string, jsonOut bool) int {
	bw := bufio.NewWriterSize(w, 1<<16)
	defer bw.Flush()
	code := ExitOK
	var rec Record
	var ctl MACControl
	var line []byte
	for _, path := range paths {
		err := readFile(path, func(n int, f *Frame) {
			line = line[:0]
			switch {
			case Decode(n, f, &rec):
				if jsonOut {
					line = rec.AppendJSON(line)
				} else {
					line = rec.AppendText(line)
				}
			case DecodeMACControl(n, f, &ctl):
				if jsonOut {
					line = ctl.AppendJSON(line)
				} else {
					line = ctl.AppendText(line)
				}
			default:
				return
			}
			line = append(line, '\n')
			bw.Write(line)
		})
		if err != nil {
			bw.Flush()
			fmt.Fprintf(errw, "uroce pcap decode: %s: %v\n", path, err)
			if !errors.Is(err, ErrLinkType) { // frames of other link types are only skipped
				code = max(code, exitFor(err))
			}
		}
	}
	return code
}

func exitFor(err error) int {
	if err == nil {
		return ExitOK
	}
	var pe *os.PathError
	if errors.As(err, &pe) {
		return ExitUsage
	}
	return ExitFound
}

// VerifyOptions select the output of RunVerify.
type VerifyOptions struct {
	JSON   bool // findings and summary as JSON objects, one per line
	Strict bool // flow anomalies fail too
	Quiet  bool // only the summary
}

// RunVerify verifies the files, writes findings and the summary to w and
// returns the exit code: ExitFound when an ICRC or format error was
// found (with Strict also a flow anomaly), or a file is damaged.
func RunVerify(w, errw io.Writer, paths []string, opt VerifyOptions) int {
	bw := bufio.NewWriterSize(w, 1<<16)
	defer bw.Flush()
	var total Counts
	code := ExitOK
	var line []byte
	for _, path := range paths {
		report := func(f *Finding) {
			if opt.Quiet {
				return
			}
			line = line[:0]
			if opt.JSON {
				line = f.AppendJSON(line, path)
			} else {
				line = f.AppendText(line, path)
			}
			line = append(line, '\n')
			bw.Write(line)
		}
		v := NewVerifier(report)
		err := readFile(path, v.Frame)
		if exitFor(err) == ExitUsage {
			bw.Flush()
			fmt.Fprintf(errw, "uroce pcap verify: %v\n", err)
			code = ExitUsage
			continue
		}
		v.Finish() // also for a damaged file: its frames up to the damage
		if err != nil {
			fileErr := &Finding{Frame: v.Counts.Packets, Severity: SevError, Check: "file", Message: err.Error()}
			if errors.Is(err, ErrLinkType) {
				fileErr.Severity, fileErr.Check = SevNote, "link_type"
			} else {
				code = max(code, exitFor(err))
				v.Counts.Errors++
			}
			report(fileErr)
		}
		c := v.Counts
		if c.Errors > 0 || (opt.Strict && c.Flow > 0) {
			code = max(code, ExitFound)
		}
		if len(paths) > 1 {
			line = line[:0]
			if opt.JSON {
				line = c.AppendJSON(line, path)
			} else {
				line = append(line, path...)
				line = append(line, ": "...)
				line = append(line, c.Summary()...)
				line = appendExtra(line, &c)
			}
			line = append(line, '\n')
			bw.Write(line)
		}
		total.Add(c)
	}
	line = line[:0]
	if opt.JSON {
		line = total.AppendJSON(line, "")
	} else {
		if len(paths) == 1 && (total.Truncated > 0 || total.Flow > 0 || total.MACControl > 0) {
			line = append(line, '(')
			line = append(line, appendExtra(nil, &total)[len("; "):]...)
			line = append(line, ")\n"...)
		}
		line = append(line, total.Summary()...)
	}
	line = append(line, '\n')
	bw.Write(line)
	return code
}

// appendExtra appends the counts that the summary line leaves out.
func appendExtra(b []byte, c *Counts) []byte {
	if c.Truncated > 0 {
		b = append(b, "; "...)
		b = strconv.AppendInt(b, int64(c.Truncated), 10)
		b = append(b, " truncated"...)
	}
	if c.Flow > 0 {
		b = append(b, "; "...)
		b = strconv.AppendInt(b, int64(c.Flow), 10)
		b = append(b, " flow anomalies"...)
	}
	if c.MACControl > 0 {
		b = append(b, "; "...)
		b = strconv.AppendInt(b, int64(c.MACControl), 10)
		b = append(b, " mac control frames"...)
	}
	return b
}

// AppendText appends the finding as `FILE:FRAME: SEVERITY: CHECK: [FLOW: ]MESSAGE`.
func (f *Finding) AppendText(b []byte, file string) []byte {
	b = append(b, file...)
	b = append(b, ':')
	b = strconv.AppendInt(b, int64(f.Frame), 10)
	b = append(b, ": "...)
	b = append(b, f.Severity.String()...)
	b = append(b, ": "...)
	b = append(b, f.Check...)
	b = append(b, ": "...)
	if f.Flow != nil {
		b = f.Flow.Src.AppendTo(b)
		b = append(b, " > "...)
		b = f.Flow.Dst.AppendTo(b)
		b = append(b, " qp "...)
		b = appendHex(b, uint64(f.Flow.DestQP), 6)
		if f.Flow.UD {
			b = append(b, " from qp "...)
			b = appendHex(b, uint64(f.Flow.SrcQP), 6)
		}
		b = append(b, ": "...)
	}
	return append(b, f.Message...)
}

// AppendJSON appends the finding as a JSON object with keys file, frame,
// severity, check, flow (src_ip, dst_ip, dest_qp[, src_qp]) and message.
func (f *Finding) AppendJSON(b []byte, file string) []byte {
	b = append(b, `{"file":`...)
	b = strconv.AppendQuote(b, file)
	b = appendKeyInt(b, "frame", uint64(f.Frame))
	b = append(b, `,"severity":"`...)
	b = append(b, f.Severity.String()...)
	b = append(b, `","check":"`...)
	b = append(b, f.Check...)
	b = append(b, '"')
	if f.Flow != nil {
		b = append(b, `,"flow":{"src_ip":"`...)
		b = f.Flow.Src.AppendTo(b)
		b = append(b, `","dst_ip":"`...)
		b = f.Flow.Dst.AppendTo(b)
		b = append(b, '"')
		b = appendKeyInt(b, "dest_qp", uint64(f.Flow.DestQP))
		if f.Flow.UD {
			b = appendKeyInt(b, "src_qp", uint64(f.Flow.SrcQP))
		}
		b = append(b, '}')
	}
	b = append(b, `,"message":`...)
	b = strconv.AppendQuote(b, f.Message)
	return append(b, '}')
}

// AppendJSON appends the counts as a JSON object: summary (the text
// summary line), packets, roce, icrc_ok, icrc_bad, malformed, truncated,
// errors, flow_anomalies, notes, mac_control, and file when file is not
// empty.
func (c *Counts) AppendJSON(b []byte, file string) []byte {
	b = append(b, '{')
	if file != "" {
		b = append(b, `"file":`...)
		b = strconv.AppendQuote(b, file)
		b = append(b, ',')
	}
	b = append(b, `"summary":`...)
	b = strconv.AppendQuote(b, c.Summary())
	for _, kv := range []struct {
		k string
		v int
	}{{"packets", c.Packets}, {"roce", c.RoCE}, {"icrc_ok", c.ICRCOK}, {"icrc_bad", c.ICRCBad},
		{"malformed", c.Malformed}, {"truncated", c.Truncated}, {"errors", c.Errors},
		{"flow_anomalies", c.Flow}, {"notes", c.Notes}, {"mac_control", c.MACControl}} {
		b = appendKeyInt(b, kv.k, uint64(kv.v))
	}
	return append(b, '}')
}
