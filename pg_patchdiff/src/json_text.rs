//! `json` arguments and results as text, untouched.
//!
//! Requests enter as `json`, not `jsonb` (jsonb refuses `\u0000` and lone surrogates, which must
//! become audited rejections), and the engine parses them itself, so no input can make pgrx
//! panic while converting an argument.

use pgrx::datum::JsonString;
use pgrx::prelude::*;

pub struct JsonText(pub String);

impl FromDatum for JsonText {
    unsafe fn from_polymorphic_datum(
        datum: pg_sys::Datum,
        is_null: bool,
        oid: pg_sys::Oid,
    ) -> Option<Self> {
        if !is_null {
            // The raw (uncompressed) size, read from the header without detoasting: an
            // oversized argument is refused before it is copied or parsed.
            // SAFETY: a non-null json datum is a varlena.
            let raw = unsafe { pg_sys::toast_raw_datum_size(datum) };
            let size = raw.saturating_sub(pg_sys::VARHDRSZ);
            let max = crate::max_argument_bytes();
            if size > max {
                return Some(JsonText(patchdiff_engine::api::args::oversized_marker(
                    size, max,
                )));
            }
        }
        // SAFETY: forwarded unchanged; JsonString copies the detoasted varlena into a String.
        unsafe { JsonString::from_polymorphic_datum(datum, is_null, oid) }.map(|j| JsonText(j.0))
    }
}

impl IntoDatum for JsonText {
    fn into_datum(self) -> Option<pg_sys::Datum> {
        self.0.into_datum()
    }

    fn type_oid() -> pg_sys::Oid {
        pg_sys::JSONOID
    }
}

pgrx::impl_sql_translatable!(JsonText, "json");

// pgrx implements its calling convention for its own types only; these two mirror its
// `argue_from_datum!` and `impl_repackage_into_datum!` for this one.
unsafe impl<'fcx> pgrx::callconv::ArgAbi<'fcx> for JsonText {
    unsafe fn unbox_arg_unchecked(arg: pgrx::callconv::Arg<'_, 'fcx>) -> Self {
        let index = arg.index();
        // SAFETY: the argument is declared `json`; JsonText reads it as text.
        unsafe { arg.unbox_arg_using_from_datum() }
            .unwrap_or_else(|| panic!("argument {index} must not be null"))
    }

    unsafe fn unbox_nullable_arg(
        arg: pgrx::callconv::Arg<'_, 'fcx>,
    ) -> pgrx::nullable::Nullable<Self> {
        // SAFETY: as above.
        unsafe { arg.unbox_arg_using_from_datum() }.into()
    }
}

unsafe impl pgrx::callconv::BoxRet for JsonText {
    unsafe fn box_into<'fcx>(
        self,
        fcinfo: &mut pgrx::callconv::FcInfo<'fcx>,
    ) -> pgrx::datum::Datum<'fcx> {
        match self.into_datum() {
            // SAFETY: a freshly palloc'd text datum, returned as the function's json result.
            Some(datum) => unsafe { fcinfo.return_raw_datum(datum) },
            None => fcinfo.return_null(),
        }
    }
}
