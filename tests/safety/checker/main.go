// safety-checker: is one driver's history of a lock linearizable as a mutex?
//
// Reads {"ops": [...], "timeout_s": N} on stdin (safety.py builds it from
// the clients' JSON-lines histories) and prints {"result": "Ok" | "Illegal"
// | "Unknown", "ops": N}. With -html FILE an Illegal history is also drawn
// there (porcupine's visualization).
//
// Operations (c = the client process; call/return in ns on CLOCK_MONOTONIC):
//
//	acq   ok        the lock was free or already c's (re-entry), now c's
//	write any       c claims to hold it (a write under its token): must be c's
//	rel   ok        c held it; now free
//	rel   notowner  c learns its hold is gone: free if it was c's, else unchanged
//	rel   unknown   open-ended (return = end of history): c's hold may or may
//	                not have been released
//	lost  -         a lost / in-doubt report to c, open-ended from the report:
//	                c's hold may end at any point after it (never before)
//	expire -        a fixed lease, open-ended from acquire invoke + lease
//
// So a history is Illegal exactly when some grant or write cannot be placed
// while the lock was free or c's: a double hold that no report, expiry or
// release to the earlier holder came before.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/anishathalye/porcupine"
)

type op struct {
	C    int    `json:"c"`
	K    string `json:"k"`
	O    string `json:"o"`
	Call int64  `json:"call"`
	Ret  int64  `json:"ret"`
}

type input struct {
	Ops      []op    `json:"ops"`
	TimeoutS float64 `json:"timeout_s"`
}

type in struct {
	c    int
	kind string
}

const free = -1

func step(state, inp, out interface{}) []interface{} {
	s := state.(int)
	i := inp.(in)
	o := out.(string)
	switch i.kind {
	case "acq":
		if s == free || s == i.c {
			return []interface{}{i.c}
		}
		return nil
	case "write":
		if s == i.c {
			return []interface{}{s}
		}
		return nil
	case "rel":
		switch o {
		case "ok":
			if s == i.c {
				return []interface{}{free}
			}
			return nil
		case "notowner":
			if s == i.c {
				return []interface{}{free}
			}
			return []interface{}{s}
		default:
			if s == i.c {
				return []interface{}{free, s}
			}
			return []interface{}{s}
		}
	case "lost", "expire":
		if s == i.c {
			return []interface{}{free, s}
		}
		return []interface{}{s}
	}
	return nil
}

func main() {
	html := flag.String("html", "", "draw an Illegal history into this file")
	flag.Parse()
	var inp input
	if err := json.NewDecoder(os.Stdin).Decode(&inp); err != nil {
		fmt.Fprintln(os.Stderr, "safety-checker: bad input:", err)
		os.Exit(2)
	}
	if inp.TimeoutS <= 0 {
		inp.TimeoutS = 30
	}
	nm := porcupine.NondeterministicModel{
		Init: func() []interface{} { return []interface{}{free} },
		Step: step,
		DescribeOperation: func(i, o interface{}) string {
			x, ok := i.(in)
			if !ok {
				return "?"
			}
			out, _ := o.(string)
			return fmt.Sprintf("p%d %s %s", x.c, x.kind, out)
		},
		DescribeState: func(s interface{}) string {
			v, ok := s.(int)
			if !ok {
				return "?"
			}
			if v == free {
				return "free"
			}
			return fmt.Sprintf("held by p%d", v)
		},
	}
	model := nm.ToModel()
	hist := make([]porcupine.Operation, 0, len(inp.Ops))
	for _, o := range inp.Ops {
		hist = append(hist, porcupine.Operation{ClientId: o.C, Input: in{o.C, o.K}, Call: o.Call,
			Output: o.O, Return: o.Ret})
	}
	res, info := porcupine.CheckOperationsVerbose(model, hist,
		time.Duration(inp.TimeoutS*float64(time.Second)))
	if res == porcupine.Illegal && *html != "" {
		if err := porcupine.VisualizePath(model, info, *html); err != nil {
			fmt.Fprintln(os.Stderr, "safety-checker: visualization:", err)
		}
	}
	result := map[string]interface{}{"result": string(res), "ops": len(hist)}
	if res == porcupine.Illegal {
		result["stuck_at"] = stuckAt(hist, info)
	}
	out, _ := json.Marshal(result)
	fmt.Println(string(out))
}

// stuckAt: the operations (by index in the input) that the longest partial
// linearization could not place, earliest call first, at most 8: where the
// history stops being a mutex's.
func stuckAt(hist []porcupine.Operation, info porcupine.LinearizationInfo) []int {
	best := []int{}
	for _, part := range info.PartialLinearizations() {
		for _, lin := range part {
			if len(lin) > len(best) {
				best = lin
			}
		}
	}
	in := make(map[int]bool, len(best))
	for _, i := range best {
		in[i] = true
	}
	out := []int{}
	for i := range hist {
		if !in[i] {
			out = append(out, i)
			if len(out) == 8 {
				break
			}
		}
	}
	return out
}
