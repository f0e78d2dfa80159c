//! Every limit of the contract, as a named constant beside the clause it implements.

/// "Authoritative Reads": 4,000 default / 8,000 max code points per call.
pub const READ_DEFAULT_CHARS: usize = 4_000;
pub const READ_MAX_CHARS: usize = 8_000;

/// "Exact Search": context_chars default 40 / cap 400; max_results cap 200.
pub const SEARCH_CONTEXT_DEFAULT: usize = 40;
pub const SEARCH_CONTEXT_MAX: usize = 400;
pub const SEARCH_MAX_RESULTS: usize = 200;

/// "Bounded rejection context": at most 256 code points, 4,096 bytes each, 8,192 combined;
/// a failure window replaces the prefix when fewer than 64 code points of the location show.
pub const CONTEXT_MAX_CHARS: usize = 256;
pub const CONTEXT_MAX_BYTES: usize = 4_096;
pub const CONTEXTS_MAX_BYTES: usize = 8_192;
pub const CONTEXT_MIN_VISIBLE: usize = 64;

/// "Exact candidates": five candidates, 20 code points per side, 64-code-point match preview,
/// 8,192 bytes including the wrapper.
pub const CANDIDATES_MAX: usize = 5;
pub const CANDIDATE_CONTEXT_CHARS: usize = 20;
pub const CANDIDATE_PREVIEW_CHARS: usize = 64;
pub const CANDIDATES_MAX_BYTES: usize = 8_192;

/// "Common input and request-key rules": client_request_id is 1..128 printable ASCII.
pub const CLIENT_REQUEST_ID_MAX: usize = 128;

/// change_id: an identifier, bounded so that it stays a short label in evidence.
pub const CHANGE_ID_MAX: usize = 64;

/// Filenames are labels, not paths to open; bounded like a POSIX PATH_MAX.
pub const FILENAME_MAX_BYTES: usize = 4_096;
