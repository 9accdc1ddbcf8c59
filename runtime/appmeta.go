package runtime

import (
	"bytes"
	"errors"
	"fmt"
	"slices"

	"github.com/dgraph-io/badger/v4"

	"github.com/flowrun/flowrun/internal/state"
	"github.com/flowrun/flowrun/tx"
)

// What the runtime records about the app in its store, beside the queues'
// and the flowlets' own state, so that an edit of the app file that the
// stored data cannot follow is refused at start instead of silently
// duplicating, skipping or misrouting events:
//
//	"\x01app/name"          the app's name
//	"\x01app/key/" queue    the partition key a queue's events were hashed by
//
// Flowlet state is kept per app name, the queues per store: an app renamed
// on the same store would start its sources over while its queues still
// held the old app's events.
const (
	appMetaPrefix = "\x01app/"
	appNameKey    = appMetaPrefix + "name"
	queueKeyMeta  = appMetaPrefix + "key/"
)

// ErrOtherApp: the store holds another app's data.
var ErrOtherApp = errors.New("the store belongs to another app")

func (s *store) getMeta(key string) (val string, ok bool, err error) {
	err = s.db.View(func(txn *badger.Txn) error {
		it, err := txn.Get([]byte(key))
		if errors.Is(err, badger.ErrKeyNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		v, err := it.ValueCopy(nil)
		val, ok = string(v), true
		return err
	})
	return val, ok, err
}

// setMeta writes the records (key, value, key, value, …) in one write, made
// durable as the queues' own metadata is.
func (s *store) setMeta(kv ...string) error {
	err := s.db.Update(func(txn *badger.Txn) error {
		for i := 0; i+1 < len(kv); i += 2 {
			if err := txn.Set([]byte(kv[i]), []byte(kv[i+1])); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil || !s.durable {
		return err
	}
	return tx.SyncBadger(s.db)
}

// checkApp checks that the store is app's (otherApp) and says whether it
// records so.
func (s *store) checkApp(app string) (recorded bool, err error) {
	name, recorded, err := s.otherApp(app)
	if err != nil {
		return recorded, err
	}
	if name != "" {
		return recorded, fmt.Errorf("%w: %s holds the state and queues of app %q, and this app is %q: flowlet state is kept per app name, so its sources would start over while the queues still hold %q's events — keep app: %s, or give this app a data directory of its own (--data)",
			ErrOtherApp, s.dir, name, app, name, name)
	}
	return recorded, nil
}

// otherApp names the app whose store this is when that is not app ("" when
// it is app's, or nobody's yet), and says whether the store records its
// app. A store from before the record is app's if it holds flowlet state of
// app, or of no app at all.
func (s *store) otherApp(app string) (name string, recorded bool, err error) {
	name, ok, err := s.getMeta(appNameKey)
	if err != nil {
		return "", false, err
	}
	recorded = ok
	if !ok {
		// Older versions let a renamed app run on, so there may be state
		// of more than one app.
		apps, err := s.stateApps()
		if err != nil {
			return "", false, err
		}
		if len(apps) > 0 && !slices.Contains(apps, app) {
			name, ok = apps[0], true
		}
	}
	if !ok || name == app {
		return "", recorded, nil
	}
	return name, recorded, nil
}

// CheckApp fails with ErrOtherApp when the store holds another app's data:
// reads of app in it would answer for that app ("no state", its queues).
func (s *Store) CheckApp(app string) error {
	exit, err := s.st.enter()
	if err != nil {
		return err
	}
	defer exit()
	name, _, err := s.st.otherApp(app)
	if err != nil || name == "" {
		return err
	}
	return fmt.Errorf("%w: %s holds the data of app %q, not of %q (read it as %s, or give %s's own data directory with --data)", ErrOtherApp, s.st.dir, name, app, name, app)
}

// stateApps lists the app names that have flowlet state in the store.
func (s *store) stateApps() ([]string, error) {
	var apps []string
	err := s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte(state.Prefix)})
		defer it.Close()
		for it.Rewind(); it.Valid(); {
			rest := it.Item().Key()[len(state.Prefix):]
			i := bytes.IndexByte(rest, '/')
			if i < 0 {
				it.Next()
				continue
			}
			app := string(rest[:i])
			apps = append(apps, app)
			// Skip the rest of this app's keys: "/" + 1 is "0".
			it.Seek([]byte(state.Prefix + app + "0"))
		}
		return nil
	})
	return apps, err
}
