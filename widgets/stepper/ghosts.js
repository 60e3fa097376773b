/**
 * Removed nodes that would hide under new ones. A pass's removed nodes are drawn faded where
 * they stood, but a node of the new graph may stand there now: `ghostPlaces` moves them aside.
 * One pure function of one stage's data.
 */

/** Where to draw the removed nodes of a stage that would sit on one of its nodes (a fused
 * kernel takes the place of its last op): each moves aside, to the nearest place in its row that
 * no box and no edge bend takes, so both boxes and both badges stay readable. Returns node id ->
 * [x, y] in layout units, for the removed nodes that move. */
export function ghostPlaces(stage) {
  const rows = new Map(); // y -> the x of everything drawn in that row, sorted
  const row = (y) => rows.get(y) ?? rows.set(y, []).get(y);
  /** Where x goes in a sorted row: the index of the first entry not less than x. */
  const at = (xs, x) => {
    let lo = 0;
    let hi = xs.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (xs[mid] < x) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  };
  const take = (x, y) => {
    const xs = row(y);
    xs.splice(at(xs, x), 0, x);
  };
  const free = (x, y) => {
    const xs = row(y);
    const i = at(xs, x);
    return (i === xs.length || xs[i] - x >= 1) && (i === 0 || x - xs[i - 1] >= 1);
  };
  for (const n of stage.nodes) take(n.x, n.y);
  for (const e of stage.edges) for (const [x, y] of e.route.slice(1, -1)) take(x, y);
  const hidden = stage.removed.filter((n) => !free(n.x, n.y));
  for (const n of stage.removed) if (free(n.x, n.y)) take(n.x, n.y);
  const moved = new Map();
  for (const n of hidden) {
    let x = n.x;
    for (let d = 1; !free(x, n.y); d++) {
      x = free(n.x + d, n.y) ? n.x + d : n.x - d;
    }
    take(x, n.y);
    moved.set(n.id, [x, n.y]);
  }
  return moved;
}
