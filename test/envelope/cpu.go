package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strings"
	"time"

	"github.com/google/pprof/profile"
)

// The pprof label the controller's goroutines carry, and every goroutine they
// start: runtime/pprof labels are inherited.
const (
	componentLabel = "component"
	controllerName = "controller"
)

// withControllerLabel runs f with the controller's label on the goroutine, and so
// on every goroutine f starts.
func withControllerLabel(ctx context.Context, f func(context.Context)) {
	pprof.Do(ctx, pprof.Labels(componentLabel, controllerName), f)
}

// fakeAPIPrefixes name the functions that serve a request in the in-memory API:
// the fake API itself, client-go's fake clientset and its reactors. Only the
// controller's goroutines call them, but what they do an API server does, not
// the controller.
var fakeAPIPrefixes = []string{
	"github.com/attachdetach-controller/attachdetach-controller/internal/fakeapi.",
	"k8s.io/client-go/testing.",
	"k8s.io/client-go/gentype.(*Fake",
	"k8s.io/client-go/gentype.(*alsoFake",
	"k8s.io/client-go/kubernetes/fake.",
}

// resyncFunction is the controller's periodic pass, to tell whether one ran in a
// phase.
const resyncFunction = "github.com/attachdetach-controller/attachdetach-controller/pkg/controller.(*Controller).resync"

// fakeAPIFunction tells whether a function is the in-memory API's. The typed
// fake clients are in packages named fake under client-go's kubernetes/typed.
func fakeAPIFunction(name string) bool {
	for _, p := range fakeAPIPrefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return strings.HasPrefix(name, "k8s.io/client-go/kubernetes/typed/") && strings.Contains(name, "/fake.")
}

// cpuUse is the CPU of one phase, from a labelled CPU profile.
type cpuUse struct {
	// Controller is the CPU of the controller's goroutines outside the fake API;
	// FakeAPI is that of the controller's goroutines inside it; Other is that of
	// everything else (simulated kubelet and external-attacher, the harness, the
	// runtime's background garbage collection).
	Controller, FakeAPI, Other time.Duration
	// Resync tells whether the controller's periodic pass was seen running.
	Resync bool
}

// add returns the sum of two phases' CPU.
func (u cpuUse) add(v cpuUse) cpuUse {
	return cpuUse{
		Controller: u.Controller + v.Controller, FakeAPI: u.FakeAPI + v.FakeAPI, Other: u.Other + v.Other,
		Resync: u.Resync || v.Resync,
	}
}

// attribute sums a CPU profile's samples by who spent them.
func attribute(p *profile.Profile) (cpuUse, error) {
	idx := -1
	for i, st := range p.SampleType {
		if st.Type == "cpu" && st.Unit == "nanoseconds" {
			idx = i
		}
	}
	if idx < 0 {
		return cpuUse{}, fmt.Errorf("the profile has no cpu/nanoseconds samples")
	}
	var use cpuUse
	for _, s := range p.Sample {
		d := time.Duration(s.Value[idx])
		fake, resync := false, false
		for _, loc := range s.Location {
			for _, line := range loc.Line {
				if line.Function == nil {
					continue
				}
				fake = fake || fakeAPIFunction(line.Function.Name)
				resync = resync || line.Function.Name == resyncFunction
			}
		}
		labelled := slices.Contains(s.Label[componentLabel], controllerName)
		switch {
		case labelled && fake:
			use.FakeAPI += d
		case labelled:
			use.Controller += d
			use.Resync = use.Resync || resync
		default:
			use.Other += d
		}
	}
	return use, nil
}

// cpuProfile is a CPU profile being taken.
type cpuProfile struct {
	buf bytes.Buffer
	// file, if set, receives the profile as taken.
	file string
}

// startCPUProfile starts profiling the process's CPU; file, if not empty, is
// where stop writes the profile.
func startCPUProfile(file string) (*cpuProfile, error) {
	p := &cpuProfile{file: file}
	if err := pprof.StartCPUProfile(&p.buf); err != nil {
		return nil, fmt.Errorf("starting the CPU profile: %w", err)
	}
	return p, nil
}

// stop ends the profile and attributes its samples.
func (p *cpuProfile) stop() (cpuUse, error) {
	pprof.StopCPUProfile()
	if p.file != "" {
		if err := os.MkdirAll(filepath.Dir(p.file), 0o755); err != nil {
			return cpuUse{}, err
		}
		if err := os.WriteFile(p.file, p.buf.Bytes(), 0o644); err != nil {
			return cpuUse{}, fmt.Errorf("writing the CPU profile: %w", err)
		}
	}
	parsed, err := profile.Parse(&p.buf)
	if err != nil {
		return cpuUse{}, fmt.Errorf("reading the CPU profile: %w", err)
	}
	return attribute(parsed)
}
