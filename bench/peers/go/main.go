// redsync contender of the hilock peer benchmark (bench/peers/run.sh).
// Same command line and JSON output as every other contender (see
// bench/peers/contender.c): peers-redsync SCENARIO key=value...
// redsync v4 over go-redis v9, used as its README shows: rs.NewMutex(name),
// Lock(), Unlock(); a waiter retries after a random 50-250 ms (its default).
package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	goredislib "github.com/redis/go-redis/v9"
	"golang.org/x/sys/unix"
)

const lease = 10 * time.Second

var A = map[string]string{}

func arg(k, def string) string {
	if v, ok := A[k]; ok {
		return v
	}
	if def == "" {
		fmt.Fprintf(os.Stderr, "redsync contender: missing %s=\n", k)
		os.Exit(2)
	}
	return def
}

func iarg(k, def string) int64 {
	v, err := strconv.ParseInt(arg(k, def), 10, 64)
	if err != nil {
		fmt.Fprintf(os.Stderr, "redsync contender: bad %s\n", k)
		os.Exit(2)
	}
	return v
}

// CLOCK_MONOTONIC ns: the same clock as every other contender's.
func now() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic(err)
	}
	return ts.Nano()
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "redsync contender:", err)
		os.Exit(1)
	}
}

func newRedsync(urls []string, poolSize int) *redsync.Redsync {
	pools := make([]redis.Pool, 0, len(urls))
	for _, u := range urls {
		opt, err := goredislib.ParseURL(u)
		check(err)
		opt.PoolSize = poolSize
		opt.MinIdleConns = poolSize
		c := goredislib.NewClient(opt)
		check(c.Ping(context.Background()).Err())
		pools = append(pools, goredis.NewPool(c))
	}
	return redsync.New(pools...)
}

func pairs(urls []string) {
	rs := newRedsync(urls, 2)
	m := rs.NewMutex(arg("key", ""), redsync.WithExpiry(lease))
	n := int(iarg("n", ""))
	warm := int(iarg("warm", "200"))
	lat := make([]int64, n)
	var t0 int64
	for i := -warm; i < n; i++ {
		s := now()
		if i == 0 {
			t0 = s
		}
		check(m.Lock())
		_, err := m.Unlock()
		check(err)
		if i >= 0 {
			lat[i] = now() - s
		}
	}
	elapsed := now() - t0
	sort.Slice(lat, func(a, b int) bool { return lat[a] < lat[b] })
	fmt.Printf("{\"pairs_per_s\": %.1f, \"p50_us\": %.1f, \"p99_us\": %.1f}\n",
		float64(n)*1e9/float64(elapsed), float64(lat[n/2])/1e3, float64(lat[n*99/100])/1e3)
}

func threads(urls []string) {
	n := int(iarg("threads", "16"))
	rs := newRedsync(urls, n)
	start := now() + 300_000_000
	end := start + iarg("ms", "")*1_000_000
	var count int64
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			m := rs.NewMutex(fmt.Sprintf("%s:%d", arg("key", ""), i), redsync.WithExpiry(lease))
			for now() < start {
				time.Sleep(100 * time.Microsecond)
			}
			for now() < end {
				check(m.Lock())
				_, err := m.Unlock()
				check(err)
				atomic.AddInt64(&count, 1)
			}
		}(i)
	}
	wg.Wait()
	fmt.Printf("{\"pairs_per_s\": %.1f}\n", float64(count)*1e9/float64(now()-start))
}

func readCounter(f *os.File) int64 {
	b := make([]byte, 8)
	if _, err := f.ReadAt(b, 0); err != nil {
		return 0
	}
	return int64(binary.LittleEndian.Uint64(b))
}

func handoff(urls []string) {
	rs := newRedsync(urls, 2)
	f, err := os.OpenFile(arg("counter", ""), os.O_RDWR, 0)
	check(err)
	m := rs.NewMutex(arg("key", ""), redsync.WithExpiry(lease), redsync.WithTries(math.MaxInt32))
	gap := iarg("gap", "1")
	hold := time.Duration(iarg("hold_us", "0")) * time.Microsecond
	fmt.Println("ready")
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		os.Exit(1)
	}
	end := now() + iarg("ms", "")*1_000_000
	var ev []string
	for {
		req := now()
		check(m.Lock())
		acq := now()
		mine := readCounter(f) + 1
		b := make([]byte, 8)
		binary.LittleEndian.PutUint64(b, uint64(mine))
		_, err := f.WriteAt(b, 0)
		check(err)
		time.Sleep(hold)
		unl := now()
		_, err = m.Unlock()
		check(err)
		if acq >= end {
			break
		}
		ev = append(ev, fmt.Sprintf("[%d,%d,%d]", req, acq, unl))
		for readCounter(f) < mine+gap && now() < end {
			time.Sleep(50 * time.Microsecond)
		}
	}
	fmt.Printf("{\"events\": [%s]}\n", strings.Join(ev, ","))
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: peers-redsync pairs|threads|handoff|redlock key=value...")
		os.Exit(2)
	}
	for _, a := range os.Args[2:] {
		k, v, _ := strings.Cut(a, "=")
		A[k] = v
	}
	var urls []string
	if u, ok := A["urls"]; ok {
		urls = strings.Split(u, ",")
	} else {
		urls = []string{arg("url", "")}
	}
	switch os.Args[1] {
	case "pairs", "redlock":
		pairs(urls)
	case "threads":
		threads(urls)
	case "handoff":
		handoff(urls)
	default:
		fmt.Fprintf(os.Stderr, "redsync has no %s scenario\n", os.Args[1])
		os.Exit(2)
	}
}
