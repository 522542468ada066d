package locks

import (
	"context"
	"net"
	"sort"
	"strconv"
	"sync"
	"time"
)

// The cluster numbers every client keeps alike (clients/texts.json).
const (
	// maxRedirects: a command is resent to the node a MOVED names at most
	// this many times; the next MOVED fails it (moved_loop).
	maxRedirects = 5
	// clusterDownTries: the CLUSTERDOWN answer that fails a command
	// (slot_unserved); each one before it refreshes the map, pauses for
	// clusterDownPause, and resends.
	clusterDownTries = 10
	clusterDownPause = 100 * time.Millisecond
	// mapRefreshNodeTimeout: how long one node has to answer CLUSTER
	// SLOTS when the map is refreshed, dialling included (the connect
	// timeout if shorter); then the next node is asked, and this one is
	// asked last from then on.
	mapRefreshNodeTimeout = 2 * time.Second
)

// slotMap is each slot's node, host:port as dialled; "" for a slot no
// node serves as far as the map knows.
type slotMap [slotCount]string

// router sends each key's commands to the node that serves the key's
// slot: the store's routing in cluster mode, that is once the server
// Connect reached answered CLUSTER SLOTS with a map. Each node has a pool
// of its own, opened with the store's settings when first needed.
type router struct {
	cfg   connectConfig
	seeds []string // the addresses Connect was given, as host:port
	home  string   // the node Connect reached

	mu         sync.Mutex
	slots      *slotMap
	pools      map[string]*pool
	closed     bool
	refreshing chan struct{} // closed when the refresh in flight ends
	redirects  int           // MOVED answers followed
	// failing: nodes whose connections failed, or that did not answer a
	// refresh in time, until they answer one; asked for the map last.
	failing map[string]bool
}

// newRouter starts routing with the map home's node answered.
func newRouter(cfg connectConfig, seeds []string, home *pool, slots *slotMap) *router {
	r := &router{cfg: cfg, seeds: seeds, home: home.addr.hostPort(), slots: slots, pools: map[string]*pool{}, failing: map[string]bool{}}
	r.pools[r.home] = home
	home.setOnFail(func() { r.refreshSoon(r.home) })
	return r
}

// poolFor answers the pool of the node that serves key's slot; for a slot
// the map has no node for, that of a known node (it answers MOVED).
func (r *router) poolFor(key string) (*pool, error) {
	slot := slotOf(key)
	r.mu.Lock()
	defer r.mu.Unlock()
	node := r.slots[slot]
	for i := 1; node == "" && i < slotCount; i++ {
		node = r.slots[(slot+i)%slotCount]
	}
	if node == "" {
		node = r.home
	}
	return r.poolLocked(node)
}

// nodeFor answers the node the map has for key's slot ("" for none).
func (r *router) nodeFor(key string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.slots[slotOf(key)]
}

// poolLocked answers node's pool, opening it when new.
func (r *router) poolLocked(node string) (*pool, error) {
	if r.closed {
		return nil, errPoolClosed
	}
	if p, ok := r.pools[node]; ok {
		return p, nil
	}
	host, portText, err := net.SplitHostPort(node)
	port, perr := strconv.Atoi(portText)
	if err != nil || perr != nil {
		// Node names are made by nodeName from checked parts.
		return r.pools[r.home], nil
	}
	p := newPool(address{host: host, port: port}, &r.cfg)
	p.setOnFail(func() { r.refreshSoon(node) })
	r.pools[node] = p
	return p, nil
}

// tries is one command's way to its node: the redirections it took, and
// the node a MOVED sent it to.
type tries struct {
	moved, down int
	next        string // the node to send to next; "": the map's
}

// poolOf answers the pool of node, opening it when new.
func (r *router) poolOf(node string) (*pool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.poolLocked(node)
}

// redirect is an answer that sends the command elsewhere: MOVED or
// CLUSTERDOWN, its line as the server wrote it.
type redirect string

func (r redirect) Error() string { return string(r) }

// redirection answers the reply line as a redirect when it is one the
// router follows; nil in single-node mode (r nil), or for any other line.
func (r *router) redirection(line string) error {
	if r == nil {
		return nil
	}
	if _, _, ok := parseMoved(line); ok || isClusterDown(line) {
		return redirect(line)
	}
	return nil
}

// follow acts on a redirect of a command for key: MOVED notes the slot's
// node (and refreshes the whole map in the background) and has the
// command sent there, CLUSTERDOWN refreshes the map and pauses. It
// answers nil when the command is to be sent again, or the error that
// ends it: moved_loop, slot_unserved, or ctx's. A hold passes its ctx
// bounded by its wait plus its grace (holdBound), so the refresh and the
// pause end with the hold's bound.
func (r *router) follow(ctx context.Context, lock, key string, line redirect, t *tries) error {
	if slot, node, ok := parseMoved(string(line)); ok {
		if t.moved++; t.moved > maxRedirects {
			return errMovedLoop(lock, key)
		}
		r.noteMoved(slot, node)
		t.next = node
		return nil
	}
	if t.down++; t.down >= clusterDownTries {
		return errSlotUnserved(lock, key, slotOf(key))
	}
	r.refresh(ctx, "")
	pause := time.NewTimer(clusterDownPause)
	defer pause.Stop()
	select {
	case <-pause.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// noteMoved: a MOVED said node serves slot; the whole map is refreshed
// in the background.
func (r *router) noteMoved(slot int, node string) {
	r.mu.Lock()
	r.slots[slot] = node
	r.redirects++
	r.mu.Unlock()
	r.refreshSoon("")
}

// The texts of a command the cluster sent around, worded as
// clients/texts.json words them for every client.

func errMovedLoop(lock, key string) *Error {
	return keyError(KindClosed, lock, key, "redirected "+strconv.Itoa(maxRedirects)+" times without reaching the node that serves it")
}

func errSlotUnserved(lock, key string, slot int) *Error {
	what := "no node serves its slot (" + strconv.Itoa(slot) + ") after " + strconv.Itoa(clusterDownTries) + " tries"
	return keyError(KindClosed, lock, key, what)
}

// refreshSoon refreshes the map in the background, unless a refresh is
// in flight already; failed (a node whose connection just failed, or "")
// is asked last from now on.
func (r *router) refreshSoon(failed string) {
	r.mu.Lock()
	if failed != "" {
		r.failing[failed] = true
	}
	busy := r.refreshing != nil || r.closed
	r.mu.Unlock()
	if !busy {
		go r.refresh(context.Background(), "")
	}
}

// refresh asks CLUSTER SLOTS of the nodes the map knows, then of the
// others known, then of the addresses Connect was given, those whose
// connections failed last (failed, if not "", from now on), and takes the
// first map answered. Each node has mapRefreshNodeTimeout (the connect
// timeout if shorter) to answer, dialling included. A refresh already in
// flight is waited for instead.
func (r *router) refresh(ctx context.Context, failed string) {
	r.mu.Lock()
	if failed != "" {
		r.failing[failed] = true
	}
	if ch := r.refreshing; ch != nil || r.closed {
		r.mu.Unlock()
		if ch != nil {
			select {
			case <-ch:
			case <-ctx.Done():
			}
		}
		return
	}
	done := make(chan struct{})
	r.refreshing = done
	nodes := r.candidatesLocked()
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		r.refreshing = nil
		r.mu.Unlock()
		close(done)
	}()
	for _, node := range nodes {
		p, err := r.poolOf(node)
		if err != nil {
			return
		}
		slots, err := askSlots(ctx, p)
		if err != nil && ctx.Err() != nil {
			return
		}
		r.mu.Lock()
		if err != nil {
			r.failing[node] = true
		} else {
			delete(r.failing, node)
		}
		if slots != nil {
			r.slots = slots
		}
		r.mu.Unlock()
		if slots != nil {
			return
		}
	}
}

// askSlots is clusterSlots within mapRefreshNodeTimeout (the connect
// timeout if shorter), dialling included: past it the connection is
// closed and the node's error answered.
func askSlots(ctx context.Context, p *pool) (*slotMap, error) {
	within := mapRefreshNodeTimeout
	if p.timeout < within {
		within = p.timeout
	}
	nodeCtx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	return clusterSlots(nodeCtx, p)
}

// candidatesLocked: the nodes the map knows, then the others known, then
// the seeds, each once, those failing last.
func (r *router) candidatesLocked() []string {
	seen := map[string]bool{}
	var nodes []string
	add := func(node string) {
		if node != "" && !seen[node] {
			seen[node] = true
			nodes = append(nodes, node)
		}
	}
	last := ""
	for _, node := range r.slots {
		if node != last {
			add(node)
			last = node
		}
	}
	known := make([]string, 0, len(r.pools))
	for node := range r.pools {
		known = append(known, node)
	}
	sort.Strings(known)
	for _, node := range append(known, r.seeds...) {
		add(node)
	}
	sort.SliceStable(nodes, func(i, j int) bool { return !r.failing[nodes[i]] && r.failing[nodes[j]] })
	return nodes
}

// close closes every node's pool; later commands answer closed.
func (r *router) close() {
	r.mu.Lock()
	r.closed = true
	pools := r.pools
	r.mu.Unlock()
	for _, p := range pools {
		p.close()
	}
}

// clusterSlots asks p's node for its map: nil when it answers no map (a
// single node answers CLUSTER SLOTS with an error), or the error of its
// connection.
func clusterSlots(ctx context.Context, p *pool) (*slotMap, error) {
	c, err := p.get(ctx)
	if err != nil {
		return nil, err
	}
	return slotsOn(ctx, p, c)
}

// slotsOn sends CLUSTER SLOTS on c, a connection of p, and reads its
// answer as clusterSlots does, giving c back to p.
func slotsOn(ctx context.Context, p *pool, c *conn) (*slotMap, error) {
	r, err := p.ask(ctx, c, "CLUSTER", "SLOTS")
	if err != nil {
		return nil, err
	}
	if r.err != nil {
		p.discard(c, r.err)
		return nil, errConnectionClosed(r.err)
	}
	p.put(c)
	if r.v.kind != '*' || r.v.null {
		return nil, nil
	}
	return slotsOf(r.v, p.addr.host), nil
}

// slotsOf reads CLUSTER SLOTS's answer: [start, end, [host, port, id,
// ...], replicas...] for each served range; the first node of a range
// serves it. A host the server leaves empty is the one asked. Entries
// that do not read are skipped.
func slotsOf(v value, askedHost string) *slotMap {
	slots := &slotMap{}
	for _, entry := range v.items {
		if len(entry.items) < 3 || len(entry.items[2].items) < 2 {
			continue
		}
		start, end, node := entry.items[0], entry.items[1], entry.items[2].items
		host := node[0].text
		if host == "" || host == "?" {
			host = askedHost
		}
		name, ok := nodeName(host, int(node[1].num))
		if !ok || start.kind != ':' || end.kind != ':' || node[1].kind != ':' ||
			start.num < 0 || start.num > end.num || end.num >= slotCount {
			continue
		}
		for s := start.num; s <= end.num; s++ {
			slots[s] = name
		}
	}
	return slots
}
