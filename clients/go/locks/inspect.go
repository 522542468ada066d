package locks

import (
	"context"
	"time"
)

// KeyInfo is a snapshot of one key on the server, from Lock.Inspect.
type KeyInfo struct {
	// Held says whether the key has a holder: Holders > 0.
	Held bool
	// Fence is the highest fence among the current holders while the key
	// is held, else the last grant's.
	Fence uint64
	// HeldFor is how long the longest-held current lease has been held,
	// and LeaseLeft how long it has before it runs out at its ttl
	// (renewals push that back) or is revoked at its maxHold. Both are nil
	// when the key is free, or when the server keeps no clock for the
	// lease.
	HeldFor, LeaseLeft *time.Duration
	// Waiters is how many stand in the key's line, the holders not
	// counted.
	Waiters int
	// Holders is how many leases hold the key, and PermitsHeld how many of
	// its permits they hold in all.
	Holders, PermitsHeld int
	// Holder is the oldest current holder, nil while the key is free.
	Holder *KeyHolder
	// HolderList is every current holder, oldest grant first.
	HolderList []KeyHolder
}

// KeyHolder is a connection that holds a key, as the server knows it.
type KeyHolder struct {
	// ID is the connection's id, as CLIENT LIST shows it and CLIENT KILL
	// ID takes it.
	ID int64
	// Name is the connection's CLIENT SETNAME, "" when it has none.
	Name string
	// Addr is the connection's address, ip:port.
	Addr string
	// Lease is the lease's id on that connection.
	Lease int64
	// Fence is the lease's fence, and Permits how many permits it holds.
	Fence   uint64
	Permits int
	// Note is the lease's note (the Note hold option, or an election's
	// Proclaim), "" when it has none.
	Note string
}

// Inspect answers a snapshot of key (INSPECT on the server), or nil when
// the key has no state there (never held, nobody waiting). It takes a
// connection of its own, holds nothing, and does not wait in the key's
// line. A bad key is KindInvalid at once, a closed store KindClosed; a
// server that answers nothing within the store's DialTimeout fails
// KindClosed; a ctx that ends first answers ctx.Err(). In a cluster it
// asks the node that serves the key, as Hold does.
func (l *Lock) Inspect(ctx context.Context, key any) (*KeyInfo, error) {
	k, bad := keyText(l.name, key)
	if bad != nil {
		return nil, bad
	}
	if bad := checkKey(l.name, k); bad != nil {
		return nil, bad
	}
	var t tries
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		info, err := l.inspectOnce(ctx, k, &t)
		rd, ok := err.(redirect)
		if !ok {
			return info, err
		}
		if err := l.store.router.follow(ctx, l.name, k, rd, &t); err != nil {
			return nil, err
		}
	}
}

// inspectOnce sends INSPECT to key's node and reads its answer: the
// snapshot, or a redirect.
func (l *Lock) inspectOnce(ctx context.Context, key string, t *tries) (*KeyInfo, error) {
	p, c, err := l.store.connFor(ctx, key, t)
	if err == errPoolClosed {
		return nil, errStoreClosed(l.name, key)
	} else if err != nil {
		return nil, err
	}
	r, err := p.ask(ctx, c, "INSPECT", l.name, key)
	if err != nil {
		return nil, err
	}
	return l.inspected(p, c, r, key)
}

// unanswered is the error of a command on c that got no answer (c is
// discarded then), or nil when the answer came.
func (l *Lock) unanswered(p *pool, c *conn, r result, key string) error {
	switch {
	case r.err == errShutStoreClosed:
		p.discard(c, r.err)
		return errStoreClosed(l.name, key)
	case r.err != nil:
		p.discard(c, r.err)
		return errConnectionClosedKey(l.name, key, r.err)
	}
	return nil
}

// refused is the error an error reply about key says: a redirection to
// follow, or the server's text.
func (l *Lock) refused(text, key string) error {
	if rd := l.store.router.redirection(text); rd != nil {
		return rd
	}
	return fromReply(text, l.name, key)
}

// inspected reads INSPECT's answer on c, a connection of p.
func (l *Lock) inspected(p *pool, c *conn, r result, key string) (*KeyInfo, error) {
	if err := l.unanswered(p, c, r, key); err != nil {
		return nil, err
	}
	p.put(c)
	switch {
	case r.v.isError():
		return nil, l.refused(r.v.text, key)
	case r.v.null:
		return nil, nil
	}
	info, ok := keyInfoOf(r.v)
	if !ok {
		return nil, keyError(KindInvalid, l.name, key, "the server answered INSPECT with something other than a map")
	}
	return info, nil
}

// keyInfoOf reads INSPECT's map (a flat array of names and values in
// RESP2). Names it does not know are skipped: a server may add more.
func keyInfoOf(v value) (*KeyInfo, bool) {
	if v.kind != '%' && v.kind != '*' || len(v.items)%2 != 0 {
		return nil, false
	}
	info := &KeyInfo{}
	counted := false // a server without permits sends no holders
	for i := 0; i < len(v.items); i += 2 {
		field := v.items[i+1]
		switch v.items[i].text {
		case "held":
			info.Held = field.num != 0
		case "fence":
			info.Fence = uint64(field.num)
		case "held_for_ms":
			info.HeldFor = millisOf(field)
		case "lease_left_ms":
			info.LeaseLeft = millisOf(field)
		case "waiters":
			info.Waiters = int(field.num)
		case "holders":
			info.Holders, counted = int(field.num), true
		case "permits_held":
			info.PermitsHeld = int(field.num)
		case "holder":
			info.Holder = holderOf(field)
		case "holder_list":
			info.HolderList = holderListOf(field)
		}
	}
	if !counted && info.Holder != nil {
		// Before permits, a key had one holder with one permit, whose
		// fence was the key's.
		info.Holders, info.PermitsHeld = 1, 1
		info.Holder.Fence, info.Holder.Permits = info.Fence, 1
		info.HolderList = []KeyHolder{*info.Holder}
	}
	return info, true
}

// millisOf: a number of milliseconds, nil for a null.
func millisOf(v value) *time.Duration {
	if v.null || v.kind != ':' {
		return nil
	}
	d := time.Duration(v.num) * time.Millisecond
	return &d
}

// holderOf reads the holder's map; nil for a null.
func holderOf(v value) *KeyHolder {
	if v.null || len(v.items)%2 != 0 {
		return nil
	}
	h := &KeyHolder{}
	for i := 0; i < len(v.items); i += 2 {
		field := v.items[i+1]
		switch v.items[i].text {
		case "id":
			h.ID = field.num
		case "name":
			h.Name = field.text
		case "addr":
			h.Addr = field.text
		case "lease":
			h.Lease = field.num
		case "fence":
			h.Fence = uint64(field.num)
		case "permits":
			h.Permits = int(field.num)
		case "note":
			h.Note = field.text
		}
	}
	return h
}

// holderListOf reads holder_list: the holders' maps, oldest first.
func holderListOf(v value) []KeyHolder {
	var list []KeyHolder
	for _, item := range v.items {
		if h := holderOf(item); h != nil {
			list = append(list, *h)
		}
	}
	return list
}
