package integration

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
)

// logLine is what the JSON log format writes on each line.
type logLine struct {
	TS      *float64 `json:"ts"`
	Msg     *string  `json:"msg"`
	V       *int     `json:"v"`
	Address string   `json:"address"`
}

// jsonLog reads the controller's log, each line but the command lines
// internal/proc writes ("+ binary args") a JSON object with ts, msg and v (an
// error's line has err instead of v), as --logging-format=json writes it; an
// error names the first line that is not.
func jsonLog(path string) ([]logLine, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var lines []logLine
	for _, text := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
		if text == "" || strings.HasPrefix(text, "+ ") {
			continue
		}
		var l logLine
		if err := json.Unmarshal([]byte(text), &l); err != nil {
			return nil, fmt.Errorf("log line %q: %w", text, err)
		}
		if l.TS == nil || l.Msg == nil || (l.V == nil && !strings.Contains(text, `"err":`)) {
			return nil, fmt.Errorf("log line %q lacks ts, msg or v", text)
		}
		lines = append(lines, l)
	}
	return lines, nil
}

// TestJSONLogsAndRuntimeVerbosity runs the controller with --logging-format=json
// at -v=2: every line it writes is a JSON object with ts, msg and v, none above
// v 2; after PUT /debug/flags/v (served with --enable-pprof) with 4, the next
// attach logs at v 4.
func TestJSONLogsAndRuntimeVerbosity(t *testing.T) {
	s := newScenario(t, scenarioOptions{controllerArgs: []string{
		"--logging-format=json", "-v=2", "--enable-pprof", "--http-endpoint=127.0.0.1:0",
	}})
	var addr string
	s.Eventually("the address in the JSON line \"Serving probes and metrics\"", func() bool {
		lines, err := jsonLog(s.ctrl.LogFile())
		s.Must(err)
		for _, l := range lines {
			if *l.Msg == "Serving probes and metrics" {
				addr = l.Address
			}
		}
		return addr != ""
	})
	maxV := func() int {
		lines, err := jsonLog(s.ctrl.LogFile())
		s.Must(err)
		highest := 0
		for _, l := range lines {
			if l.V != nil {
				highest = max(highest, *l.V)
			}
		}
		return highest
	}

	s.AttachedVolume("before", "app-before", s.Nodes[0])
	if v := maxV(); v > 2 {
		t.Errorf("a line at v %d with -v=2", v)
	}

	req, err := http.NewRequest(http.MethodPut, "http://"+addr+"/debug/flags/v", strings.NewReader("4"))
	s.Must(err)
	resp, err := http.DefaultClient.Do(req)
	s.Must(err)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("PUT /debug/flags/v: %s", resp.Status)
	}
	s.AttachedVolume("after", "app-after", s.Nodes[0])
	s.Eventually("a line at v 4 after PUT /debug/flags/v 4", func() bool { return maxV() == 4 })
}
