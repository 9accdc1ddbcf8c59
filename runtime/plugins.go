package runtime

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/flowrun/flowrun/flowlet"
	"github.com/flowrun/flowrun/internal/pluginhost"
	"github.com/flowrun/flowrun/planner"
)

// Plugin flowlets (specs/plugins.md): a flowlet with `plugin:` runs in
// processes of its own. The runtime opens each plugin once per app (build on
// demand, handshake, Describe) with internal/pluginhost and uses the
// plugin's flowlet.Type for the instances, exactly like a built-in type.

// appDir is the directory a relative `plugin:` path is relative to.
func (o *Options) appDir(plan *planner.Plan) string {
	if o.AppDir != "" {
		return o.AppDir
	}
	for _, f := range plan.Flowlets {
		if f.Pos.File != "" {
			return filepath.Dir(f.Pos.File)
		}
	}
	return "."
}

// PluginCacheDir returns where plugins given as package directories are
// built: opts.PluginCacheDir, else flowrun/plugins in the user's cache
// directory (os.UserCacheDir) when it is writable, else "plugins" in the
// app's data directory.
func PluginCacheDir(opts Options, app string) string {
	if opts.PluginCacheDir != "" {
		return opts.PluginCacheDir
	}
	if base, err := os.UserCacheDir(); err == nil {
		dir := filepath.Join(base, "flowrun", "plugins")
		if writable(dir) {
			return dir
		}
	}
	data := opts.DataDir
	if data == "" {
		data = DefaultDataDir(app)
	}
	return filepath.Join(data, "plugins")
}

func writable(dir string) bool {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return false
	}
	f, err := os.CreateTemp(dir, ".probe-*")
	if err != nil {
		return false
	}
	f.Close()
	os.Remove(f.Name())
	return true
}

func (o *Options) pluginOptions(app string, log *slog.Logger) pluginhost.Options {
	return pluginhost.Options{
		Logger:       log,
		CacheDir:     PluginCacheDir(*o, app),
		CallTimeout:  o.PluginCallTimeout,
		StartTimeout: o.PluginStartTimeout,
	}
}

// openPlugins opens the plugin of every flowlet that has one, checks what
// it declares against the plan and has it check the flowlet's config (its
// CheckConfig, when it has one). The errors (a build failure with the
// compiler's message, a failed handshake, a plugin without an output the
// app connects, a config field the plugin refuses) name the flowlet and
// carry its position in the app file.
func openPlugins(ctx context.Context, plan *planner.Plan, opts Options, log *slog.Logger) (map[string]*pluginhost.Plugin, error) {
	out := map[string]*pluginhost.Plugin{}
	var errs planner.ErrorList
	fail := func(f *planner.Flowlet, err error) {
		errs = append(errs, &planner.Error{File: f.Pos.File, Line: f.Pos.Line, Col: f.Pos.Col, Msg: err.Error()})
	}
	closeAll := func() {
		for _, p := range out {
			p.Close()
		}
	}
	var popts pluginhost.Options
	dir := opts.appDir(plan)
	for _, f := range plan.Flowlets {
		if f.Plugin == "" {
			continue
		}
		if popts.CacheDir == "" {
			popts = opts.pluginOptions(plan.App, log)
		}
		log.Info("opening plugin", "flowlet", f.Name, "plugin", f.Plugin, "path", pluginhost.Resolve(f.Plugin, dir), "cache", popts.CacheDir)
		p, err := pluginhost.Open(ctx, f.Name, f.Plugin, dir, popts)
		if err == nil {
			out[f.Name] = p
			if err = checkPluginInfo(f, p.Info()); err == nil {
				err = checkPluginConfig(ctx, f, p)
			}
		}
		switch {
		case err != nil && ctx.Err() != nil:
			// Stopped (a signal): not a problem of the app file.
			closeAll()
			return nil, fmt.Errorf("%s: %w", f.Pos, err)
		case err != nil:
			fail(f, err)
		}
	}
	if len(errs) > 0 {
		closeAll()
		return nil, errs
	}
	return out, nil
}

// checkPluginInfo applies what a plugin declares to the flowlet's
// connections, as the planner does for built-in types.
func checkPluginInfo(f *planner.Flowlet, info flowlet.TypeInfo) error {
	var msgs []string
	switch {
	case info.Sink && len(f.Outputs) > 0:
		msgs = append(msgs, fmt.Sprintf("flowlet %q: plugin %s is a sink and has no outputs, but the app connects %s", f.Name, f.Plugin, strings.Join(f.Outputs, ", ")))
	case len(info.Outputs) > 0:
		for _, o := range f.Outputs {
			if !slices.Contains(info.Outputs, o) {
				msgs = append(msgs, fmt.Sprintf("flowlet %q: plugin %s has no output %q (its outputs: %s)", f.Name, f.Plugin, o, strings.Join(info.Outputs, ", ")))
			}
		}
	}
	if info.Source && len(f.Inputs) > 0 {
		msgs = append(msgs, fmt.Sprintf("flowlet %q: plugin %s is a source and accepts no input", f.Name, f.Plugin))
	}
	if info.SingleInstance && f.Instances > 1 {
		msgs = append(msgs, fmt.Sprintf("flowlet %q: plugin %s runs as a single instance (one reader, writer or listener); instances must be 1, got %d", f.Name, f.Plugin, f.Instances))
	}
	if len(msgs) > 0 {
		return fmt.Errorf("%s", strings.Join(msgs, "; "))
	}
	return nil
}

// checkPluginConfig has the plugin check the flowlet's config as its
// instances' Init will get it (a source's without max_backlog), as the
// planner does for a built-in type with a flowlet.ConfigChecker. The
// error names the field; a plugin without CheckConfig has nothing to
// check.
func checkPluginConfig(ctx context.Context, f *planner.Flowlet, p *pluginhost.Plugin) error {
	cfg := f.Config
	if len(f.Inputs) == 0 && p.Info().Source {
		var err error
		if _, _, cfg, err = splitMaxBacklog(f.Name, cfg); err != nil {
			return err
		}
	}
	return p.CheckConfig(ctx, f.Instances, cfg)
}

// CheckPlugins opens (builds, starts, handshakes with and describes) the
// plugin of every flowlet that has one, checks what each declares against
// the plan, and closes them: what `flowrun validate` does beyond the
// planner. The error is a planner.ErrorList positioned at the flowlets.
func CheckPlugins(ctx context.Context, plan *planner.Plan, opts Options) error {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ps, err := openPlugins(ctx, plan, opts, log)
	for _, p := range ps {
		p.Close()
	}
	return err
}

// HasPlugins reports whether any flowlet of the plan is a plugin.
func HasPlugins(plan *planner.Plan) bool {
	for _, f := range plan.Flowlets {
		if f.Plugin != "" {
			return true
		}
	}
	return false
}

// typeName is how logs and errors name a flowlet's implementation.
func typeName(f *planner.Flowlet) string {
	if f.Plugin != "" {
		return "plugin " + f.Plugin
	}
	return f.Type
}
