// The same recipe as distlock's etcd mutex, from Go's own gRPC client
// (clientv3/concurrency.Mutex on a session lease), uncontended, against a
// floor measured in the same run: a put under the session's lease and its
// delete (the two writes a cycle cannot do without). Prints one JSON line.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sort"
	"time"

	"go.etcd.io/etcd/clientv3"
	"go.etcd.io/etcd/clientv3/concurrency"
)

func p50(v []float64) float64 {
	sort.Float64s(v)
	return v[len(v)/2]
}

func main() {
	endpoint := flag.String("endpoint", "127.0.0.1:12379", "etcd client endpoint")
	seconds := flag.Float64("seconds", 4, "duration")
	flag.Parse()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{*endpoint}, DialTimeout: 5 * time.Second})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer cli.Close()
	s, err := concurrency.NewSession(cli, concurrency.WithTTL(2))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer s.Close()
	ctx := context.Background()
	name := fmt.Sprintf("/go-bench-%d/", time.Now().UnixNano())
	m := concurrency.NewMutex(s, name+"lock")
	floorKey := name + "floor"
	var cycles, floors []float64
	until := time.Now().Add(time.Duration(*seconds * float64(time.Second)))
	for time.Now().Before(until) {
		t := time.Now()
		if err := m.Lock(ctx); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		if err := m.Unlock(ctx); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		cycles = append(cycles, float64(time.Since(t).Microseconds()))
		t = time.Now()
		if _, err := cli.Put(ctx, floorKey, "", clientv3.WithLease(s.Lease())); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		if _, err := cli.Delete(ctx, floorKey); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		floors = append(floors, float64(time.Since(t).Microseconds()))
	}
	// distlock's own recipe over gRPC: a txn that puts our key if absent and
	// reads the head of the queue, and a txn that deletes it if its create
	// revision is still ours.
	var recipe []float64
	key := name + "recipe/k"
	until = time.Now().Add(time.Duration(*seconds * float64(time.Second)))
	for time.Now().Before(until) {
		t := time.Now()
		r, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
			Then(clientv3.OpPut(key, "", clientv3.WithLease(s.Lease())),
				clientv3.OpGet(name+"recipe/", clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend), clientv3.WithLimit(1), clientv3.WithKeysOnly())).
			Else(clientv3.OpGet(key)).Commit()
		if err != nil || !r.Succeeded {
			fmt.Fprintln(os.Stderr, "recipe acquire", err)
			os.Exit(1)
		}
		rev := r.Header.Revision
		d, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", rev)).Then(clientv3.OpDelete(key)).Commit()
		if err != nil || !d.Succeeded {
			fmt.Fprintln(os.Stderr, "recipe release", err)
			os.Exit(1)
		}
		recipe = append(recipe, float64(time.Since(t).Microseconds()))
	}
	c, f, rc := p50(cycles), p50(floors), p50(recipe)
	out, _ := json.Marshal(map[string]interface{}{"cycles": len(cycles), "p50_us": c, "native_floor_us": f, "native_ratio": c / f,
		"recipe_p50_us": rc, "recipe_ratio": rc / f})
	fmt.Println(string(out))
}
