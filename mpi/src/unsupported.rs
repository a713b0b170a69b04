//! Every other function of the MPI-5 ABI: exported, so a program that
//! names one links and runs, and returning `MPI_ERR_UNSUPPORTED_OPERATION`
//! through the error handler of `MPI_COMM_WORLD` (fatal by default: the
//! program stops saying which call meshwork lacks). The names are the
//! ABI's `int`-returning functions, less those implemented in the other
//! modules; the handle conversions (`MPI_Comm_toint`, `MPI_Comm_fromint`
//! and their kin) and `MPI_Aint_add`/`_diff` are real.

use crate::consts::*;
use crate::state::{raise, Fail};
use crate::Handle;
use std::ffi::c_int;

/// Raise the failure of a call meshwork does not have.
fn unsupported(name: &str) -> c_int {
    raise(
        COMM_WORLD,
        name,
        Fail::new(
            ERR_UNSUPPORTED_OPERATION,
            "not implemented by meshwork's MPI (see docs/mpi.md for what is)",
        ),
    )
}

macro_rules! unsupported {
    ($($name:ident)*) => {
        $(
            #[no_mangle]
            pub extern "C" fn $name() -> c_int {
                unsupported(stringify!($name))
            }
        )*
    };
}

macro_rules! conversions {
    ($($to:ident $from:ident)*) => {
        $(
            #[no_mangle]
            pub extern "C" fn $to(h: Handle) -> c_int {
                h as c_int
            }

            #[no_mangle]
            pub extern "C" fn $from(i: c_int) -> Handle {
                i as u32 as Handle
            }
        )*
    };
}

conversions! {
    MPI_Comm_toint MPI_Comm_fromint
    MPI_Errhandler_toint MPI_Errhandler_fromint
    MPI_File_toint MPI_File_fromint
    MPI_Group_toint MPI_Group_fromint
    MPI_Info_toint MPI_Info_fromint
    MPI_Message_toint MPI_Message_fromint
    MPI_Op_toint MPI_Op_fromint
    MPI_Request_toint MPI_Request_fromint
    MPI_Session_toint MPI_Session_fromint
    MPI_Type_toint MPI_Type_fromint
    MPI_Win_toint MPI_Win_fromint
}

#[no_mangle]
pub extern "C" fn MPI_Aint_add(base: isize, disp: isize) -> isize {
    base.wrapping_add(disp)
}

#[no_mangle]
pub extern "C" fn MPI_Aint_diff(a: isize, b: isize) -> isize {
    a.wrapping_sub(b)
}

unsupported! {
    MPI_Abi_get_fortran_booleans MPI_Abi_get_fortran_info MPI_Abi_get_info
    MPI_Abi_set_fortran_booleans MPI_Abi_set_fortran_info MPI_Accumulate MPI_Accumulate_c
    MPI_Close_port MPI_Comm_accept MPI_Comm_connect MPI_Comm_create_from_group MPI_Comm_disconnect
    MPI_Comm_join MPI_Comm_remote_group MPI_Comm_remote_size MPI_Comm_spawn MPI_Comm_spawn_multiple
    MPI_Compare_and_swap MPI_Fetch_and_op MPI_File_call_errhandler MPI_File_close
    MPI_File_create_errhandler MPI_File_delete MPI_File_get_amode MPI_File_get_atomicity
    MPI_File_get_byte_offset MPI_File_get_errhandler MPI_File_get_group MPI_File_get_info
    MPI_File_get_position MPI_File_get_position_shared MPI_File_get_size MPI_File_get_type_extent
    MPI_File_get_type_extent_c MPI_File_get_view MPI_File_iread MPI_File_iread_all
    MPI_File_iread_all_c MPI_File_iread_at MPI_File_iread_at_all MPI_File_iread_at_all_c
    MPI_File_iread_at_c MPI_File_iread_c MPI_File_iread_shared MPI_File_iread_shared_c
    MPI_File_iwrite MPI_File_iwrite_all MPI_File_iwrite_all_c MPI_File_iwrite_at
    MPI_File_iwrite_at_all MPI_File_iwrite_at_all_c MPI_File_iwrite_at_c MPI_File_iwrite_c
    MPI_File_iwrite_shared MPI_File_iwrite_shared_c MPI_File_open MPI_File_preallocate MPI_File_read
    MPI_File_read_all MPI_File_read_all_begin MPI_File_read_all_begin_c MPI_File_read_all_c
    MPI_File_read_all_end MPI_File_read_at MPI_File_read_at_all MPI_File_read_at_all_begin
    MPI_File_read_at_all_begin_c MPI_File_read_at_all_c MPI_File_read_at_all_end MPI_File_read_at_c
    MPI_File_read_c MPI_File_read_ordered MPI_File_read_ordered_begin MPI_File_read_ordered_begin_c
    MPI_File_read_ordered_c MPI_File_read_ordered_end MPI_File_read_shared MPI_File_read_shared_c
    MPI_File_seek MPI_File_seek_shared MPI_File_set_atomicity MPI_File_set_errhandler
    MPI_File_set_info MPI_File_set_size MPI_File_set_view MPI_File_sync MPI_File_write
    MPI_File_write_all MPI_File_write_all_begin MPI_File_write_all_begin_c MPI_File_write_all_c
    MPI_File_write_all_end MPI_File_write_at MPI_File_write_at_all MPI_File_write_at_all_begin
    MPI_File_write_at_all_begin_c MPI_File_write_at_all_c MPI_File_write_at_all_end
    MPI_File_write_at_c MPI_File_write_c MPI_File_write_ordered MPI_File_write_ordered_begin
    MPI_File_write_ordered_begin_c MPI_File_write_ordered_c MPI_File_write_ordered_end
    MPI_File_write_shared MPI_File_write_shared_c MPI_Get MPI_Get_accumulate MPI_Get_accumulate_c
    MPI_Get_c MPI_Get_elements_x MPI_Group_from_session_pset MPI_Intercomm_create
    MPI_Intercomm_create_from_groups MPI_Intercomm_merge MPI_Lookup_name MPI_Open_port MPI_Parrived
    MPI_Pready MPI_Pready_list MPI_Pready_range MPI_Precv_init MPI_Precv_init_c MPI_Psend_init
    MPI_Psend_init_c MPI_Publish_name MPI_Put MPI_Put_c MPI_Raccumulate MPI_Raccumulate_c
    MPI_Register_datarep MPI_Register_datarep_c MPI_Rget MPI_Rget_accumulate MPI_Rget_accumulate_c
    MPI_Rget_c MPI_Rput MPI_Rput_c MPI_Session_attach_buffer MPI_Session_attach_buffer_c
    MPI_Session_call_errhandler MPI_Session_create_errhandler MPI_Session_detach_buffer
    MPI_Session_detach_buffer_c MPI_Session_finalize MPI_Session_flush_buffer
    MPI_Session_get_errhandler MPI_Session_get_info MPI_Session_get_nth_pset
    MPI_Session_get_num_psets MPI_Session_get_pset_info MPI_Session_iflush_buffer MPI_Session_init
    MPI_Session_set_errhandler MPI_T_category_changed MPI_T_category_get_categories
    MPI_T_category_get_cvars MPI_T_category_get_events MPI_T_category_get_index
    MPI_T_category_get_info MPI_T_category_get_num MPI_T_category_get_num_events
    MPI_T_category_get_pvars MPI_T_cvar_get_index MPI_T_cvar_get_info MPI_T_cvar_get_num
    MPI_T_cvar_handle_alloc MPI_T_cvar_handle_free MPI_T_cvar_read MPI_T_cvar_write
    MPI_T_enum_get_info MPI_T_enum_get_item MPI_T_event_callback_get_info
    MPI_T_event_callback_set_info MPI_T_event_copy MPI_T_event_get_index MPI_T_event_get_info
    MPI_T_event_get_num MPI_T_event_get_source MPI_T_event_get_timestamp MPI_T_event_handle_alloc
    MPI_T_event_handle_free MPI_T_event_handle_get_info MPI_T_event_handle_set_info MPI_T_event_read
    MPI_T_event_register_callback MPI_T_event_set_dropped_handler MPI_T_finalize MPI_T_init_thread
    MPI_T_pvar_get_index MPI_T_pvar_get_info MPI_T_pvar_get_num MPI_T_pvar_handle_alloc
    MPI_T_pvar_handle_free MPI_T_pvar_read MPI_T_pvar_readreset MPI_T_pvar_reset
    MPI_T_pvar_session_create MPI_T_pvar_session_free MPI_T_pvar_start MPI_T_pvar_stop
    MPI_T_pvar_write MPI_T_source_get_info MPI_T_source_get_num MPI_T_source_get_timestamp
    MPI_Type_create_darray MPI_Type_create_darray_c MPI_Type_create_keyval MPI_Type_delete_attr
    MPI_Type_free_keyval MPI_Type_get_attr MPI_Type_get_extent_x MPI_Type_get_true_extent_x
    MPI_Type_match_size MPI_Type_set_attr MPI_Type_size_x MPI_Unpublish_name MPI_Win_allocate
    MPI_Win_allocate_c MPI_Win_allocate_shared MPI_Win_allocate_shared_c MPI_Win_attach
    MPI_Win_call_errhandler MPI_Win_complete MPI_Win_create MPI_Win_create_c MPI_Win_create_dynamic
    MPI_Win_create_errhandler MPI_Win_create_keyval MPI_Win_delete_attr MPI_Win_detach MPI_Win_fence
    MPI_Win_flush MPI_Win_flush_all MPI_Win_flush_local MPI_Win_flush_local_all MPI_Win_free
    MPI_Win_free_keyval MPI_Win_get_attr MPI_Win_get_errhandler MPI_Win_get_group MPI_Win_get_info
    MPI_Win_get_name MPI_Win_lock MPI_Win_lock_all MPI_Win_post MPI_Win_set_attr
    MPI_Win_set_errhandler MPI_Win_set_info MPI_Win_set_name MPI_Win_shared_query
    MPI_Win_shared_query_c MPI_Win_start MPI_Win_sync MPI_Win_test MPI_Win_unlock MPI_Win_unlock_all
    MPI_Win_wait
}
