// Package promqleval evaluates PromQL expressions with Prometheus' own engine (the promql package
// at the version go.mod pins), for scalebot's tests of its alerts and dashboard. It is a Go test so
// that it can use Prometheus' test storage; `go test -c` builds it once into a cached binary.
//
// Input (environment): PROMQL_LOAD, a file in promqltest's `load` syntax; PROMQL_EXPRS, a JSON
// list of expressions; PROMQL_AT, the evaluation time in seconds after the load's start;
// PROMQL_OUT, where the JSON list of results goes: {"expr", "error", "series", "value"} each.
package promqleval

import (
	"context"
	"encoding/json"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/promqltest"
)

type result struct {
	Expr   string `json:"expr"`
	Error  string `json:"error"`
	Series int    `json:"series"`
	Value  string `json:"value"`
}

func TestEvaluate(t *testing.T) {
	loadPath := os.Getenv("PROMQL_LOAD")
	if loadPath == "" {
		t.Skip("PROMQL_LOAD is not set")
	}
	load, err := os.ReadFile(loadPath)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(os.Getenv("PROMQL_EXPRS"))
	if err != nil {
		t.Fatal(err)
	}
	var exprs []string
	if err := json.Unmarshal(raw, &exprs); err != nil {
		t.Fatal(err)
	}
	at, err := strconv.ParseInt(os.Getenv("PROMQL_AT"), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	storage := promqltest.LoadedStorage(t, string(load))
	engine := promqltest.NewTestEngine(t, false, 5*time.Minute, 50_000_000)
	ctx := context.Background()
	results := make([]result, 0, len(exprs))
	for _, expr := range exprs {
		r := result{Expr: expr}
		query, err := engine.NewInstantQuery(ctx, storage, nil, expr, time.Unix(at, 0))
		if err != nil {
			r.Error = err.Error()
			results = append(results, r)
			continue
		}
		res := query.Exec(ctx)
		if res.Err != nil {
			r.Error = res.Err.Error()
		} else {
			r.Value = res.Value.String()
			switch v := res.Value.(type) {
			case promql.Vector:
				r.Series = len(v)
			case promql.Matrix:
				r.Series = len(v)
			case promql.Scalar:
				r.Series = 1
			}
		}
		query.Close()
		results = append(results, r)
	}
	out, err := json.Marshal(results)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(os.Getenv("PROMQL_OUT"), out, 0o644); err != nil {
		t.Fatal(err)
	}
}
