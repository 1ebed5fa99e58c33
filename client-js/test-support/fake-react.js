// A stand-in for React with exactly the surface the hook uses (createContext, useContext,
// useState, useEffect, createElement) and the rules it relies on: hooks in call order, effects
// after a render when their dependencies change, cleanups before the next run and on unmount,
// and state updates that re-render. It is a fake at a protocol edge, so the hook can be tested
// without installing React; it is not a renderer.

let rendering = null;

export function createContext(defaultValue) {
  const context = { defaultValue };
  context.Provider = { context };
  return context;
}

export function createElement(type, props, ...children) {
  return { type, props: { ...props, children: children.length <= 1 ? children[0] : children } };
}

export function useContext(context) {
  const root = rendering;
  return root.contexts.has(context) ? root.contexts.get(context) : context.defaultValue;
}

export function useState(initial) {
  const root = rendering;
  const i = root.cursor++;
  if (!(i in root.slots)) root.slots[i] = { value: typeof initial === 'function' ? initial() : initial };
  const slot = root.slots[i];
  const set = (next) => {
    const value = typeof next === 'function' ? next(slot.value) : next;
    if (Object.is(value, slot.value) || root.unmounted) return;
    slot.value = value;
    root.schedule();
  };
  return [slot.value, set];
}

export function useEffect(effect, deps) {
  const root = rendering;
  const i = root.cursor++;
  const old = root.slots[i];
  const same = old && deps && old.deps && deps.length === old.deps.length && deps.every((d, k) => Object.is(d, old.deps[k]));
  if (same) return;
  root.slots[i] = { deps, cleanup: old?.cleanup };
  root.effects.push(() => {
    root.slots[i].cleanup?.();
    const cleanup = effect();
    root.slots[i].cleanup = typeof cleanup === 'function' ? cleanup : undefined;
  });
}

/**
 * Render `component(props)` as a root. Returns `{result, renders, update(props), unmount(),
 * settled()}`: `result` is the latest return value; `settled()` waits for scheduled re-renders.
 */
export function render(component, props = {}, contexts = new Map()) {
  const root = {
    slots: [], cursor: 0, effects: [], contexts, unmounted: false, renders: 0, result: undefined, error: null,
    props, scheduled: null,
    run() {
      this.scheduled = null;
      if (this.unmounted) return;
      rendering = this;
      this.cursor = 0;
      try {
        this.result = component(this.props);
        this.error = null;
      } catch (error) {
        this.error = error;
        return;
      } finally {
        rendering = null;
      }
      this.renders += 1;
      const effects = this.effects.splice(0);
      for (const effect of effects) effect();
    },
    schedule() {
      this.scheduled ??= Promise.resolve().then(() => this.run());
    },
  };
  root.run();
  return {
    get result() { return root.result; },
    get error() { return root.error; },
    get renders() { return root.renders; },
    update(newProps) {
      root.props = newProps;
      root.run();
    },
    async settled() {
      while (root.scheduled) await root.scheduled;
    },
    unmount() {
      root.unmounted = true;
      for (const slot of root.slots) slot?.cleanup?.();
    },
  };
}
