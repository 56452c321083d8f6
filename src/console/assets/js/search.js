// The one search box of the calls page: a call id opens that call; any
// other text is looked up as a key, a business key and an effect id at
// once, and every call found is listed with what it was found by. Each
// lookup is an exact filter of the list API, in the caller's scope.

import {get, query, scope, segment} from './api.js';
import {h, notice} from './dom.js';
import {callTable} from './calls.js';

const CALL_ID = /^c_[0-9a-f]{16}$/;
const EFFECT_ID = /^eff_[0-9a-f]{16}(_[0-9a-f]{32})?$/;

/** The nodes that show what `q` finds (or a navigation to the one call). */
export async function search(q, params, who, navigate, signal) {
  if (CALL_ID.test(q)) {
    try {
      const call = await get(`/v1/tool-calls/${segment(q)}`, signal);
      navigate(`/ui/calls/${encodeURIComponent(call.call_id)}`, {replaceState: true});
      return [];
    } catch (e) {
      if (e.status !== 404) throw e;
    }
  }
  const tenant = scope(params, who);
  // The API reads a business key typed alone (`order-42`) as its one
  // field's value, and one starting with `[` as the JSON array of them.
  const lookups = [['key', 'key'], ['business_key', 'business key']];
  if (EFFECT_ID.test(q)) lookups.unshift(['effect_id', 'effect id']);
  const answers = await Promise.all(lookups.map(([filter]) =>
    get(`/v1/tool-calls${query({[filter]: q, tenant, limit: 100})}`, signal)));
  const seen = new Map();
  answers.forEach((answer, i) => {
    for (const call of answer.calls || []) {
      const found = seen.get(call.call_id);
      const by = lookups[i][1];
      if (!found) seen.set(call.call_id, {call, by: [by]});
      else if (!found.by.includes(by)) found.by.push(by);
    }
  });
  const hits = [...seen.values()];
  if (!hits.length) {
    return [notice('info', 'Nothing found for ', h('code', null, q),
      ' as a call id, key, business key or effect id.')];
  }
  return [
    h('p', {class: 'muted', id: 'search-summary'}, `${hits.length} call${hits.length === 1 ? '' : 's'} found for `, h('code', null, q)),
    callTable(hits.map((hit) => hit.call), who, hits.map((hit) => hit.by.join(', '))),
  ];
}
